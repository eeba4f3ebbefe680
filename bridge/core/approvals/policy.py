"""The approval policy: from a tool call to allow, deny or ask, without any I/O but reading
the file system (symlinks, ``.git`` files).

The gate's promise: a command runs without a person only if every command in it is a plain
command (words and quoted strings, no expansion of any kind, read with a real shell grammar,
:mod:`shell`) that an allow rule names word by word (:mod:`rules`), and no word of it that
makes the program run other code (:mod:`runners`) is left to a rule's ``*``, and every option
under a rule's ``*`` is one the program's table knows to neither write nor run anything
(:mod:`options`; an option that writes is judged as a write, :mod:`argv_checks`). A read of
a secret path (:mod:`secrets`) asks whatever reads it. In order:

- the bridge's own chat tools never ask; file reads never ask (the sandbox decides what they
  see), except that where there is no sandbox a read of the bridge's configuration or data
  is refused;
- URL fetches (``read_url_content``, agy's browser) ask unless the URL is plain http(s)
  and its host is allowed (``allow_hosts``, :func:`plain_host`); ``search_web`` does not ask;
- a file write inside the thread's workspace (or agy's own artifact folder) never asks,
  unless it is to a protected path (:mod:`paths`: ``.git``, ``.agents`` …); a write outside
  asks;
- ``run_command`` is refused when a deny rule names any simple command of the line, allowed
  when every command is plain and allowed (by the config or the thread's "always" list), and
  asked otherwise;
- every other tool asks (a tool agy adds later is not waved through unseen).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bridge.core.approvals import argv_checks
from bridge.core.approvals.option_tables import shipped
from bridge.core.approvals.paths import protected_write
from bridge.core.approvals.rules import (
    CommandRule,
    RuleError,
    exact_rule,
    parse_rules,
    program,
    stored_rule,
)
from bridge.core.approvals.runners import SHELLS
from bridge.core.approvals.shell import LooseArgv, ShellParser

log = logging.getLogger(__name__)

RUN_COMMAND = "run_command"
MCP_TOOL = "call_mcp_tool"

# Tools that only read files (or a terminal's output), or only talk to the user.
READ_TOOLS = frozenset(
    {
        "view_file",
        "view_file_outline",
        "view_code_item",
        "view_content_chunk",
        "list_dir",
        "find_by_name",
        "grep_search",
        "codebase_search",
        "search_web",
        "read_terminal",
        "command_status",
        "list_resources",
        "read_resource",
        "task_boundary",
        "notify_user",
    }
)
# Tools that search a folder's contents: refused when the folder holds the hidden paths too.
SEARCH_TOOLS = frozenset({"grep_search", "codebase_search"})
# Tools that fetch a URL: anything the agent read can leave in the URL's query string.
URL_TOOLS = frozenset({"read_url_content", "open_browser_url"})
# A host of plain ASCII labels (no percent escapes, no Unicode dots, no IPv6 brackets).
_PLAIN_HOST = re.compile(r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?")
_URL_KEYS = ("Url", "URL", "url", "Uri", "TargetUrl")
# Tools that write one file, and the argument naming it.
WRITE_TOOLS = frozenset({"write_to_file", "replace_file_content", "multi_replace_file_content"})
_PATH_KEYS = ("TargetFile", "AbsolutePath", "FilePath", "Path")
# How deep deny rules look into `sh -c '…'`.
NESTED_SHELLS = 3

PREVIEW_LINES = 12
PREVIEW_CHARS = 1200


@dataclass(frozen=True)
class Rules:
    """What the operator configured ([approvals])."""

    allow_commands: Sequence[str] = ()
    deny_commands: Sequence[str] = ()
    allow_hosts: Sequence[str] = ()
    # Options an operator adds to the shipped tables: {"mytool": "-v -o=write"}.
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Place:
    """Where the thread's agent may write without asking."""

    workspace: Path
    own_servers: frozenset[str] = frozenset()  # the bridge's MCP servers as agy names them
    scratch: Path | None = None  # agy's artifact folder of this conversation
    # Paths no tool may read (the config file and the data directory, where no sandbox
    # hides them).
    hidden: tuple[Path, ...] = ()
    # Paths read only with a person's approval, whatever reads them: agy's login, the
    # bridge's own files, [approvals] secret_paths.
    secrets: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Allow:
    why: str


@dataclass(frozen=True)
class Deny:
    reason: str


@dataclass(frozen=True)
class Ask:
    """A person must decide. ``summary`` is what would run; ``preview`` a short excerpt or diff;
    ``pattern`` what "always" adds to the thread's list (None when it cannot be allowed
    always, like a chained command)."""

    summary: str
    preview: str = ""
    pattern: str | None = None


Verdict = Allow | Deny | Ask


class Policy:
    """The verdicts of one configuration. Holds the shell parser: make one per gate, not one
    per call."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.allow = parse_rules(rules.allow_commands)
        self.deny = parse_rules(rules.deny_commands)
        self.hosts = tuple(host.lower().strip() for host in rules.allow_hosts)
        self.parser = ShellParser()
        self.tables = shipped().extended(rules.options)

    def judge(
        self,
        name: str,
        args: Mapping[str, Any],
        place: Place,
        always: Sequence[CommandRule] = (),
    ) -> Verdict:
        """The verdict on one tool call; ``always`` is the thread's own allow list."""
        if name == MCP_TOOL and str(args.get("ServerName", "")) in place.own_servers:
            return Allow("the bridge's own chat tool")
        if name in READ_TOOLS:
            secret = _reads_secret(name, args, place)
            if secret is not None:
                summary = f"{name} {_short_args(args)}".strip()
                return Ask(summary=summary, preview=_SECRET_NOTE.format(secret), pattern=None)
            return _judge_read(name, args, place)
        if name in URL_TOOLS:
            return self._judge_url(name, args)
        if name in WRITE_TOOLS:
            return _judge_write(name, args, place)
        if name == RUN_COMMAND:
            cwd = args.get("Cwd")
            return self.judge_command(
                str(args.get("CommandLine", "")),
                always,
                place,
                cwd=cwd if isinstance(cwd, str) and cwd else None,
            )
        return Ask(summary=f"{name} {_short_args(args)}".strip(), pattern=None)

    def judge_command(
        self,
        text: str,
        always: Sequence[CommandRule] = (),
        place: Place | None = None,
        cwd: str | None = None,
    ) -> Verdict:
        if not text.strip():
            return Deny("an empty command line")
        line = self.parser.parse(text)
        for argv in self._every_command(line.loose, NESTED_SHELLS):
            for rule in self.deny:
                if rule.denies(argv):
                    return Deny(f"the bridge's configuration refuses `{rule.text}` commands")
        if not line.plain:
            return Ask(summary=text, preview=f"Not a plain command: {line.why}.")
        whys, notes = [], []
        always_ok = len(line.commands) == 1  # "always" is offered for one command only
        where = _where(place, cwd)
        for argv in line.commands:
            hidden = _names_hidden(argv, place) if place is not None and place.hidden else None
            secret = argv_checks.secret_word(argv, where)
            found = argv_checks.findings(argv, self.tables, where)
            if hidden is not None or secret is not None:
                word = hidden if hidden is not None else secret
                notes.append(_SECRET_NOTE.format(word))
                whys.append("")
                always_ok = False
            elif any(rule.covers(argv, found) for rule in self.allow):
                whys.append("allowed by the configuration")
            elif any(rule.covers(argv, found) for rule in always):
                whys.append("allowed always in this thread")
            else:
                notes += [what for _, what in found]
                whys.append("")
        if all(whys):
            return Allow(whys[0] if len(set(whys)) == 1 else "allowed by the configuration")
        pattern = exact_rule(line.commands[0]) if always_ok else None
        preview = ""
        if notes:
            preview = "Not covered by a rule's `*`: " + "; ".join(dict.fromkeys(notes)) + "."
        return Ask(summary=text, preview=preview, pattern=pattern)

    def _every_command(self, commands: Iterable[LooseArgv], depth: int) -> Iterator[LooseArgv]:
        """The commands, and those inside ``sh -c '…'`` when that code is a literal."""
        for argv in commands:
            yield argv
            if depth <= 0 or not argv or argv[0] is None or program(argv[0]) not in SHELLS:
                continue
            for index, word in enumerate(argv[1:-1], start=1):
                code = argv[index + 1]
                if word and word.startswith("-") and "c" in word and code is not None:
                    yield from self._every_command(self.parser.parse(code).loose, depth - 1)

    def _judge_url(self, name: str, args: Mapping[str, Any]) -> Verdict:
        url = next((str(args[k]) for k in _URL_KEYS if isinstance(args.get(k), str)), "")
        host = plain_host(url)
        if host and any(_host_matches(pattern, host) for pattern in self.hosts):
            return Allow(f"{host} is in allow_hosts")
        summary = f"{name} {url}" if url else f"{name} {_short_args(args)}"
        return Ask(summary=summary.strip(), pattern=None)

    def always_rules(self, rows: Iterable[str]) -> tuple[CommandRule, ...]:
        """A thread's stored "always" rows as rules; a row whose meaning is no longer certain
        is dropped (it asks again), with a warning naming it."""
        return self.read_always(rows)[0]

    def read_always(self, rows: Iterable[str]) -> tuple[tuple[CommandRule, ...], list[str]]:
        """(the rules, a sentence for each row that is dropped)."""
        found, dropped = [], []
        for row in rows:
            try:
                found.append(stored_rule(row))
            except RuleError as exc:
                log.warning("a stored always-allowed pattern is no longer used: %s", exc)
                dropped.append(str(exc))
        return tuple(found), dropped


def judge(
    name: str, args: Mapping[str, Any], rules: Rules, place: Place, always: Sequence[str] = ()
) -> Verdict:
    """One verdict with a policy made for it (tests; the gate keeps its :class:`Policy`)."""
    policy = Policy(rules)
    return policy.judge(name, args, place, policy.always_rules(always))


_SECRET_NOTE = (
    "`{}` is a secret (agy's login, the bridge's own files or a configured secret path): "
    "whatever reads it asks, and what it prints is scrubbed from the chat"
)


def _where(place: Place | None, cwd: str | None) -> argv_checks.Where | None:
    if place is None:
        return None
    roots = tuple(Path(os.path.realpath(root)) for root in (place.workspace, place.scratch) if root)
    base = Path(os.path.realpath(os.path.join(place.workspace, cwd or ".")))
    return argv_checks.Where(base, roots, tuple(Path(os.path.realpath(s)) for s in place.secrets))


def _reads_secret(name: str, args: Mapping[str, Any], place: Place) -> str | None:
    """A path argument of a read tool that is a secret (or, for a tool that searches file
    contents, a folder holding one)."""
    where = _where(place, None)
    if where is None or not where.secrets:
        return None
    for value in _strings(args):
        path = _resolve(value, place.workspace)
        holds = name in SEARCH_TOOLS and any(argv_checks.below(s, path) for s in where.secrets)
        if argv_checks.is_secret(path, where) or holds:
            return value
    return None


def _names_hidden(argv: Sequence[str], place: Place) -> str | None:
    """An argument naming the bridge's config or data directory (no sandbox hides them): an
    allowed `cat *` must not print the chat tokens."""
    for word in argv[1:]:
        for candidate in (word, *word.split("=", 1)[1:]):
            if candidate and _is_hidden(_resolve(candidate, place.workspace), place):
                return word
    return None


def _is_hidden(path: Path, place: Place) -> bool:
    hidden = [Path(os.path.realpath(p)) for p in place.hidden]
    own = [_resolve(str(r), place.workspace) for r in (place.workspace, place.scratch) if r]
    # The thread's own workspace may lie inside the data directory (the default one).
    return any(_inside(path, h) for h in hidden) and not any(_inside(path, r) for r in own)


def plain_host(url: str) -> str:
    """The host of an http(s) URL that every URL reader agrees on, or "" (then it asks).
    Python's ``urlsplit`` and WHATWG (browsers, most fetchers) disagree on some spellings:
    WHATWG reads ``\\`` as ``/`` (``https://evil\\@docs.python.org/`` is evil's) and drops
    tabs and newlines, and a host may hide behind userinfo, percent escapes or Unicode dots.
    So a URL with any of these, or another scheme, has no plain host."""
    if not url or any(c == "\\" or c.isspace() or not c.isprintable() for c in url):
        return ""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or "@" in parts.netloc:
        return ""
    host = (parts.hostname or "").lower()
    return host if _PLAIN_HOST.fullmatch(host) else ""


def _host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


def _judge_read(name: str, args: Mapping[str, Any], place: Place) -> Verdict:
    if not place.hidden:
        return Allow("a read-only tool")
    hidden = [Path(os.path.realpath(p)) for p in place.hidden]
    for value in _strings(args):
        path = _resolve(value, place.workspace)
        inside = _is_hidden(path, place)
        holds = name in SEARCH_TOOLS and any(_inside(h, path) for h in hidden)
        if inside or holds:
            return Deny("the bridge's own configuration and data are not readable by the agent")
    return Allow("a read-only tool")


def _strings(args: Mapping[str, Any]) -> Iterator[str]:
    for value in args.values():
        if isinstance(value, str) and value:
            yield value
        elif isinstance(value, list):
            yield from (item for item in value if isinstance(item, str) and item)


def _judge_write(name: str, args: Mapping[str, Any], place: Place) -> Verdict:
    target = next((str(args[k]) for k in _PATH_KEYS if args.get(k)), "")
    if not target:
        return Ask(summary=f"{name} (no file named)")
    path = _resolve(target, place.workspace)
    roots = [place.workspace, *([place.scratch] if place.scratch else [])]
    for root in roots:
        resolved = _resolve(str(root), place.workspace)
        if _inside(path, resolved):
            why = protected_write(str(path), str(resolved))
            if why is None:
                return Allow("a write inside the thread's workspace")
            preview = write_preview(args)
            note = f"A protected path: {why}."
            return Ask(summary=f"{name} {path}", preview=f"{note}\n{preview}".strip())
    return Ask(summary=f"{name} {path}", preview=write_preview(args), pattern=None)


def _resolve(target: str, base: Path) -> Path:
    # realpath: a symlink inside the workspace that points outside it is a write outside.
    return Path(os.path.realpath(os.path.join(base, os.path.expanduser(target))))


def _inside(path: Path, root: Path) -> bool:
    return argv_checks.within(path, root)


def write_preview(args: Mapping[str, Any]) -> str:
    """A short view of what an edit writes: the new content, or a diff of the replacement."""
    lines: list[str] = []
    if isinstance(args.get("CodeContent"), str):
        lines = [f"+ {line}" for line in str(args["CodeContent"]).splitlines()]
    chunks = args.get("ReplacementChunks")
    if not isinstance(chunks, list):
        chunks = [args] if "TargetContent" in args or "ReplacementContent" in args else []
    for chunk in chunks:
        if not isinstance(chunk, Mapping):
            continue
        lines += [f"- {line}" for line in str(chunk.get("TargetContent", "")).splitlines()]
        lines += [f"+ {line}" for line in str(chunk.get("ReplacementContent", "")).splitlines()]
    return _cut(lines)


def _cut(lines: list[str]) -> str:
    shown = lines[:PREVIEW_LINES]
    text = "\n".join(shown)
    hidden = ""
    if len(text) > PREVIEW_CHARS:
        hidden = f"{len(text) - PREVIEW_CHARS:,} more characters"
        text = text[:PREVIEW_CHARS]
    if len(lines) > len(shown):
        more = f"{len(lines) - len(shown):,} more line(s)"
        hidden = f"{hidden} and {more}" if hidden else more
    if hidden:
        text += f"\n… ({hidden} not shown)"
    return text


SHORT_ARGS = 1500


def _short_args(args: Mapping[str, Any]) -> str:
    """A tool's arguments as the request shows them; when long, cut with how much is hidden
    (the request's text says so in words, never a bare `…`)."""
    text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    if len(text) <= SHORT_ARGS:
        return text
    return f"{text[:SHORT_ARGS]} … ({len(text) - SHORT_ARGS:,} more characters not shown)"
