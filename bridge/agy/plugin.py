"""The session directory, written as an agy plugin.

agy has no flag for a system prompt, hooks or MCP servers, so each session's directory is passed
with ``--add-dir`` and holds ``.agents/plugins/<name>/`` with ``plugin.json``, the rules, the
MCP config and the hooks. The directory holds listener tokens: it is private to the bridge's user.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bridge.agy import wire

PLUGIN_NAME = "bridge"
HOOK_BUNDLE = "bridge"
# Present while the session may have something for agy's next model call. The hook command
# calls the listener only then: most model calls have nothing waiting, and skipping curl's
# start-up (about 8 ms) there is most of the bridge's cost per model call.
PENDING_FLAG = "pending"


class RuleTooLarge(ValueError):
    """Guidance or notes over agy's rule-file limit (agy would silently cut the tail)."""


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` (private to the bridge's user) so that agy never reads half of it.

    Creating a file is the costly part here (a new inode and a directory entry, a few hundred
    microseconds on a busy disk, several files per session start), so no more are made than
    needed: a file that does not exist yet is written in place, since nothing reads it before
    the plugin is complete (agy starts after); one that exists unchanged is left alone; only a
    change to an existing file goes through a temporary file and a rename.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            if path.read_bytes() == data:
                return
        except OSError:
            pass
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        return
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
    except BaseException:
        # Not left half-written for a later start to mistake for complete.
        path.unlink(missing_ok=True)
        raise


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    # orjson: the standard encoder's indented output runs in Python, a few hundred
    # microseconds for these three small files at every process start.
    _write_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")


def _check_rule(label: str, text: str) -> None:
    size = len(text.encode("utf-8"))
    if size > wire.RULE_FILE_LIMIT:
        raise RuleTooLarge(
            f"{label} is {size:,} bytes; agy reads at most {wire.RULE_FILE_LIMIT:,} bytes of a "
            "rule file, so shorten it"
        )


def plugin_dir(session_dir: Path) -> Path:
    return session_dir.joinpath(*wire.PLUGINS_DIR, PLUGIN_NAME)


def pending_flag(session_dir: Path) -> Path:
    return plugin_dir(session_dir) / PENDING_FLAG


def raise_flag(session_dir: Path) -> None:
    """Something waits for agy: the next hook call goes to the listener."""
    flag = pending_flag(session_dir)
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()


def lower_flag(session_dir: Path) -> None:
    """Called before the waiting messages are taken, so a message stored after it raises the
    flag again and no signal is lost."""
    pending_flag(session_dir).unlink(missing_ok=True)


def gated_hook_command(flag: Path, command: str) -> str:
    """Run ``command`` only while ``flag`` exists; otherwise answer ``{}`` at once."""
    quoted = shlex.quote(str(flag))
    return f"if [ -e {quoted} ]; then {command}; else cat >/dev/null 2>&1; printf '{{}}'; fi"


def tool_hook_groups(
    command: str, timeout: int, matchers: Sequence[str] = ("*",)
) -> list[wire.MatcherGroup]:
    """``PreToolUse`` matcher groups running ``command`` (with agy's ``timeout`` in seconds)
    for each tool named in ``matchers`` (``"*"``: every tool)."""
    handler = wire.HookHandler(command=command, timeout=timeout)
    return [wire.MatcherGroup(matcher=matcher, hooks=[handler]) for matcher in matchers]


def write_plugin(
    session_dir: Path,
    *,
    guidance: str,
    notes: str,
    hook_commands: Mapping[str, str],
    hook_timeout: int,
    mcp_servers: Mapping[str, str],
    pre_tool_use: Sequence[wire.MatcherGroup] = (),
) -> Path:
    """Write (or rewrite) the plugin; returns its folder. Raises RuleTooLarge before writing.

    ``pre_tool_use``: matcher groups for agy's ``PreToolUse`` hook (see
    :func:`tool_hook_groups`); none by default, and then no tool call is gated.
    """
    rules_text = wire.always_on_rule(guidance) if guidance else ""
    notes_text = wire.always_on_rule(notes) if notes else ""
    _check_rule("the guidance (rules/AGENTS.md)", rules_text)
    _check_rule("the notes (rules/notes.md)", notes_text)
    folder = plugin_dir(session_dir)
    (folder / "rules").mkdir(parents=True, exist_ok=True)
    for path in (session_dir, folder):
        os.chmod(path, 0o700)
    _write_json(folder / "plugin.json", wire.plugin_file(PLUGIN_NAME))
    for name, text in (("AGENTS.md", rules_text), ("notes.md", notes_text)):
        target = folder / "rules" / name
        if text:
            _write_atomic(target, text.encode("utf-8"))
        elif target.exists():
            target.unlink()
    handlers = {
        event: wire.HookHandler(command=command, timeout=hook_timeout)
        for event, command in hook_commands.items()
    }
    tool_handlers = {wire.PRE_TOOL_USE: list(pre_tool_use)} if pre_tool_use else None
    _write_json(folder / "hooks.json", wire.hooks_file(HOOK_BUNDLE, handlers, tool_handlers))
    _write_json(folder / "mcp_config.json", wire.mcp_config_file(dict(mcp_servers)))
    return folder
