"""Script directives: ``[[...]]`` tokens in a user's text that steer the simulated turn.

See README.md for the list. Directives that act (``tool``, ``mcp``, ``deny``, ``write``,
``fetch``) are kept in the order written; the others are settings, and the last one written
wins.
"""

from __future__ import annotations

import re

from bridge.simulator.record import field, record

_DIRECTIVE = re.compile(r"\[\[([a-z]+)(?:[ \t]+(.*?))?\]\]", re.DOTALL)
# How the bridge marks context that is not a request (a thread's history for a new
# conversation, a note that the last turn was cut off): a model reads it and acts on nothing in
# it. A block left open runs to the end of the text.
_CONTEXT = re.compile(r"<thread-history>.*?(?:</thread-history>|\Z)", re.DOTALL)


@record(frozen=True)
class Action:
    kind: str  # "tool", "mcp", "deny", "write" or "fetch"
    args: tuple[str, ...] = ()


@record
class Script:
    reply: str | None = None
    narrate: str | None = None
    calls: int = 1
    sleep: float = 0.0
    hold_file: str | None = None
    wait_file: str | None = None
    wait_first_file: str | None = None
    touch_file: str | None = None
    actions: list[Action] = field(default_factory=list)
    error: str | None = None
    fatal: str | None = None
    crash: bool = False
    hang: bool = False
    garbage: bool = False
    nulls: bool = False
    bigline: int | None = None
    subagent: bool = False
    subagent_wait_file: str | None = None
    chunks: int | None = None
    long_lines: int | None = None
    rules: bool = False
    history: bool = False
    unknown: list[str] = field(default_factory=list)


def split_context(text: str) -> tuple[str, int]:
    """(the request: the text without the context blocks, how many blocks there were)."""
    request, blocks = _CONTEXT.subn("", text)
    return request.strip(), blocks


def parse_script(text: str) -> Script:
    """The directives of the request; none inside a context block is acted on."""
    script = Script()
    request, _ = split_context(text)
    for match in _DIRECTIVE.finditer(request):
        name, arg = match.group(1), (match.group(2) or "").strip()
        try:
            _apply(script, name, arg)
        except ValueError:
            script.unknown.append(match.group(0))
    return script


def _apply(script: Script, name: str, arg: str) -> None:
    if name == "reply":
        script.reply = arg
    elif name == "narrate":
        script.narrate = arg
    elif name == "calls":
        script.calls = max(1, int(arg))
    elif name == "sleep":
        script.sleep = max(0.0, float(arg))
    elif name == "hold":
        script.hold_file = _required(arg)
    elif name == "wait":
        script.wait_file = _required(arg)
    elif name == "waitfirst":
        script.wait_first_file = _required(arg)
    elif name == "touch":
        script.touch_file = _required(arg)
    elif name == "tool":
        tool, _, command = arg.partition(" ")
        if tool != "run_command" or not command.strip():
            raise ValueError(name)
        script.actions.append(Action("tool", (tool, command.strip())))
    elif name == "mcp":
        parts = arg.split(None, 2)
        if len(parts) < 2:
            raise ValueError(name)
        script.actions.append(
            Action("mcp", (parts[0], parts[1], parts[2] if len(parts) > 2 else "{}"))
        )
    elif name == "deny":
        script.actions.append(Action("deny"))
    elif name == "fetch":
        script.actions.append(Action("fetch", (_required(arg),)))
    elif name == "write":
        target, _, text = arg.partition(" ")
        if not target:
            raise ValueError(name)
        script.actions.append(Action("write", (target, text)))
    else:
        _apply_flag(script, name, arg)


def _apply_flag(script: Script, name: str, arg: str) -> None:
    if name == "error":
        script.error = arg or "simulated error"
    elif name == "fatal":
        script.fatal = arg or "simulated fatal error"
    elif name == "crash":
        script.crash = True
    elif name == "hang":
        script.hang = True
    elif name == "garbage":
        script.garbage = True
    elif name == "nulls":
        script.nulls = True
    elif name == "bigline":
        script.bigline = max(1, int(arg))
    elif name == "subagent":
        script.subagent = True
    elif name == "subwait":
        script.subagent = True
        script.subagent_wait_file = _required(arg)
    elif name == "chunks":
        script.chunks = max(1, int(arg))
    elif name == "long":
        script.long_lines = max(0, int(arg))
    elif name == "rules":
        script.rules = True
    elif name == "history":
        script.history = True
    else:
        raise ValueError(name)


def _required(arg: str) -> str:
    if not arg:
        raise ValueError("missing argument")
    return arg
