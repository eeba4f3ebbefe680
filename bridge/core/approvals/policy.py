"""The approval policy: pure functions from a tool call to allow, deny or ask.

Nothing here does I/O. The rules, in order:

- the bridge's own chat tools and read-only tools never ask;
- a file write inside the thread's workspace (or agy's own artifact folder) never asks, a
  write outside it does;
- ``run_command`` is refused when a deny pattern matches the line or any part of a chained
  line, allowed when an allow pattern (from the config or the thread's "always" list) matches
  the whole line and the line is not chained, and asked otherwise;
- every other tool asks (a tool agy adds later is not waved through unseen).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

RUN_COMMAND = "run_command"
MCP_TOOL = "call_mcp_tool"

# Tools that only read (files, the web, a terminal's output) or only talk to the user.
READ_ONLY_TOOLS = frozenset(
    {
        "view_file",
        "view_file_outline",
        "view_code_item",
        "view_content_chunk",
        "list_dir",
        "find_by_name",
        "grep_search",
        "codebase_search",
        "read_url_content",
        "search_web",
        "read_terminal",
        "command_status",
        "list_resources",
        "read_resource",
        "task_boundary",
        "notify_user",
    }
)
# Tools that write one file, and the argument naming it.
WRITE_TOOLS = frozenset({"write_to_file", "replace_file_content", "multi_replace_file_content"})
_PATH_KEYS = ("TargetFile", "AbsolutePath", "FilePath", "Path")

# Whatever makes one line run more than one command, or send output somewhere: ; && || | & a
# backtick, $( and every redirection (< > >> 2>&1 &>), and a newline.
_CHAINED = re.compile(r"[;&|`<>\n]|\$\(")
_SPLIT = re.compile(r"&&|\|\||[;&|\n]")
_GLOB_SPECIAL = re.compile(r"([*?\[])")

PREVIEW_LINES = 12
PREVIEW_CHARS = 1200


@dataclass(frozen=True)
class Rules:
    """What the operator configured ([approvals])."""

    allow_commands: Sequence[str] = ()
    deny_commands: Sequence[str] = ()


@dataclass(frozen=True)
class Place:
    """Where the thread's agent may write without asking."""

    workspace: Path
    own_servers: frozenset[str] = frozenset()  # the bridge's MCP servers as agy names them
    scratch: Path | None = None  # agy's artifact folder of this conversation


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


def is_chained(line: str) -> bool:
    """Whether a command line runs more than one command or redirects (conservative: quoted
    operators count too)."""
    return _CHAINED.search(line) is not None


def exact_pattern(line: str) -> str:
    """A pattern that matches exactly this line (glob characters escaped)."""
    return _GLOB_SPECIAL.sub(r"[\1]", line.strip())


def matches(pattern: str, line: str) -> bool:
    return fnmatchcase(line.strip(), pattern.strip())


def allows(patterns: Sequence[str], line: str) -> bool:
    """An allow pattern matches the whole line, and the line is not chained."""
    return not is_chained(line) and any(matches(p, line) for p in patterns)


def denies(patterns: Sequence[str], line: str) -> str | None:
    """The deny pattern matching the line or any part of a chained line, if any."""
    parts = [line, *(_SPLIT.split(line) if is_chained(line) else ())]
    for pattern in patterns:
        for part in parts:
            if part.strip() and matches(pattern, part):
                return pattern
    return None


def judge(
    name: str, args: Mapping[str, Any], rules: Rules, place: Place, always: Sequence[str] = ()
) -> Verdict:
    """The policy's verdict on one tool call; ``always`` is the thread's own allow list."""
    if name == MCP_TOOL and str(args.get("ServerName", "")) in place.own_servers:
        return Allow("the bridge's own chat tool")
    if name in READ_ONLY_TOOLS:
        return Allow("a read-only tool")
    if name in WRITE_TOOLS:
        return _judge_write(name, args, place)
    if name == RUN_COMMAND:
        return _judge_command(str(args.get("CommandLine", "")), rules, always)
    return Ask(summary=f"{name} {_short_args(args)}".strip(), pattern=None)


def _judge_command(line: str, rules: Rules, always: Sequence[str]) -> Verdict:
    if not line.strip():
        return Deny("an empty command line")
    pattern = denies(rules.deny_commands, line)
    if pattern is not None:
        return Deny(f"the bridge's configuration refuses commands matching `{pattern}`")
    if allows(rules.allow_commands, line):
        return Allow("allowed by the configuration")
    if allows(always, line):
        return Allow("allowed always in this thread")
    return Ask(summary=line, pattern=None if is_chained(line) else exact_pattern(line))


def _judge_write(name: str, args: Mapping[str, Any], place: Place) -> Verdict:
    target = next((str(args[k]) for k in _PATH_KEYS if args.get(k)), "")
    if not target:
        return Ask(summary=f"{name} (no file named)")
    path = _resolve(target, place.workspace)
    roots = [place.workspace, *([place.scratch] if place.scratch else [])]
    if any(_inside(path, _resolve(str(root), place.workspace)) for root in roots):
        return Allow("a write inside the thread's workspace")
    return Ask(summary=f"{name} {path}", preview=write_preview(args), pattern=None)


def _resolve(target: str, base: Path) -> Path:
    # realpath: a symlink inside the workspace that points outside it is a write outside.
    return Path(os.path.realpath(os.path.join(base, os.path.expanduser(target))))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


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
    if len(text) > PREVIEW_CHARS:
        text = text[:PREVIEW_CHARS] + "…"
    if len(lines) > len(shown):
        text += f"\n… {len(lines) - len(shown)} more line(s)"
    return text


def _short_args(args: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return text if len(text) <= 300 else text[:300] + "…"
