"""The session directory, written as an agy plugin.

agy has no flag for a system prompt, hooks or MCP servers, so each session's directory is passed
with ``--add-dir`` and holds ``.agents/plugins/<name>/`` with ``plugin.json``, the rules, the
MCP config and the hooks. The directory holds listener tokens: it is private to the bridge's user.
The files most sessions hold alike (``plugin.json``, the rules) can be hard links to one copy
kept beside the sessions (see :func:`write_plugin`); the sandbox shows them read-only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import tempfile
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
# Shared copies are never written in place (a change is a new copy), so nobody needs to write
# them: read-only, so a process writing into a session's linked file fails instead of changing
# every session's file.
SHARED_FILE_MODE = 0o400

log = logging.getLogger(__name__)


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
        if _holds(path, data):
            return
        _replace(path, data)
        return
    try:
        _write_fd(fd, data)
    except BaseException:
        # Not left half-written for a later start to mistake for complete.
        path.unlink(missing_ok=True)
        raise


def _write_fd(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` and close it."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _holds(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


def _replace(path: Path, data: bytes) -> None:
    """Replace ``path`` with a new private file holding ``data``, through a rename."""
    tmp = _temp_name(path)
    # A leftover of an interrupted start may be a link to a shared copy: writing into it would
    # change every session's file, so it goes and the new file is a new inode.
    tmp.unlink(missing_ok=True)
    _write_fd(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), data)
    os.replace(tmp, path)


def _write_shared(path: Path, data: bytes, shared: Path | None) -> None:
    """Write ``path`` as a hard link to the one copy of ``data`` in ``shared``.

    A new inode costs far more than a new name for an existing one (see docs/agy.md), and
    ``plugin.json`` and the rules are the same for most sessions. The shared copy is never
    written after it has its name (a changed file gets a new name, linked over ``path``), so no
    session ever sees another's file change. Where a link cannot be made (``shared`` on another
    filesystem, a filesystem without hard links, ``shared`` not writable, …) ``path`` is a
    private file as before. ``shared`` None: always a private file.
    """
    if shared is None:
        _write_atomic(path, data)
        return
    copy = shared / hashlib.sha256(data).hexdigest()
    try:
        have: os.stat_result | None = path.stat()
    except FileNotFoundError:
        have = None
    if have is not None and (_same_inode(have, copy) or _holds(path, data)):
        return
    try:
        if have is None:
            # A link appears whole: nothing can read the file half-made.
            _link_copy(copy, data, path)
        else:
            tmp = _temp_name(path)
            tmp.unlink(missing_ok=True)
            _link_copy(copy, data, tmp)
            os.replace(tmp, path)
    except OSError as exc:
        log.debug("plugin file %s written privately: %s", path.name, exc)
        _write_atomic(path, data)


def _same_inode(have: os.stat_result, copy: Path) -> bool:
    try:
        return os.path.samestat(have, copy.stat())
    except OSError:
        return False


def _link_copy(copy: Path, data: bytes, dest: Path) -> None:
    """Link ``dest`` to ``copy``, making the copy first when there is none."""
    try:
        os.link(copy, dest)
        return
    except FileNotFoundError:
        pass
    _make_copy(copy, data)
    os.link(copy, dest)


def _make_copy(copy: Path, data: bytes) -> None:
    """Give ``copy`` its content under a temporary name, then its own name by a link.

    So ``copy`` never names half a file (a crash mid-write leaves only a temporary file, which
    the next start's :func:`prune_shared` removes), and a copy another bridge instance made
    meanwhile is kept rather than replaced. Read-only: a process writing into a shared copy in
    place would change every session's file.
    """
    copy.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=copy.parent, prefix=".", suffix=".tmp")
    try:
        _write_fd(fd, data)
        os.chmod(name, SHARED_FILE_MODE)
        try:
            os.link(name, copy)
        except FileExistsError:
            pass
    finally:
        Path(name).unlink(missing_ok=True)


def prune_shared(shared: Path) -> int:
    """Remove the shared copies no session links any more (and temporary files of a crashed
    write); returns how many went. Safe while sessions start: a copy removed just before a
    session links it is made again, and a session whose link fails writes a private file."""
    removed = 0
    try:
        entries = list(os.scandir(shared))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat().st_nlink == 1:
                os.unlink(entry.path)
                removed += 1
        except FileNotFoundError:
            pass
    return removed


def _json(data: Mapping[str, Any]) -> bytes:
    # orjson: the standard encoder's indented output runs in Python, a few hundred
    # microseconds for these three small files at every process start.
    return orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"


def _check_rule(label: str, text: str) -> None:
    size = len(text.encode("utf-8"))
    if size > wire.RULE_FILE_LIMIT:
        raise RuleTooLarge(
            f"{label} is {size:,} bytes; agy reads at most {wire.RULE_FILE_LIMIT:,} bytes of a "
            "rule file, so shorten it"
        )


def plugin_dir(session_dir: Path) -> Path:
    return session_dir.joinpath(*wire.PLUGINS_DIR, PLUGIN_NAME)


def agents_dir(session_dir: Path) -> Path:
    """The folder agy reads the session's plugins from (``.agents``), the plugin's parent."""
    return session_dir / wire.PLUGINS_DIR[0]


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
    shared: Path | None = None,
    url_files: Mapping[str, str] | None = None,
) -> Path:
    """Write (or rewrite) the plugin; returns its folder. Raises RuleTooLarge before writing.

    ``pre_tool_use``: matcher groups for agy's ``PreToolUse`` hook (see
    :func:`tool_hook_groups`); none by default, and then no tool call is gated.
    ``shared``: a private folder (on the sessions' filesystem) for the files many sessions hold
    alike: ``plugin.json`` and the rules become hard links to one copy there. The hooks and the
    MCP config hold this session's listener token and are always its own files.
    ``url_files``: file name -> text of the curl config files the hook commands read their URL
    (with the token) from, written into the plugin folder before ``hooks.json``.
    """
    rules_text = wire.always_on_rule(guidance) if guidance else ""
    notes_text = wire.always_on_rule(notes) if notes else ""
    _check_rule("the guidance (rules/AGENTS.md)", rules_text)
    _check_rule("the notes (rules/notes.md)", notes_text)
    folder = plugin_dir(session_dir)
    (folder / "rules").mkdir(parents=True, exist_ok=True)
    for path in (session_dir, folder):
        os.chmod(path, 0o700)
    _write_shared(folder / "plugin.json", _json(wire.plugin_file(PLUGIN_NAME)), shared)
    for name, text in (("AGENTS.md", rules_text), ("notes.md", notes_text)):
        target = folder / "rules" / name
        if text:
            _write_shared(target, text.encode("utf-8"), shared)
        elif target.exists():
            target.unlink()
    handlers = {
        event: wire.HookHandler(command=command, timeout=hook_timeout)
        for event, command in hook_commands.items()
    }
    tool_handlers = {wire.PRE_TOOL_USE: list(pre_tool_use)} if pre_tool_use else None
    for name, text in (url_files or {}).items():
        _write_atomic(folder / name, text.encode("utf-8"))
    _write_atomic(
        folder / "hooks.json", _json(wire.hooks_file(HOOK_BUNDLE, handlers, tool_handlers))
    )
    _write_atomic(folder / "mcp_config.json", _json(wire.mcp_config_file(dict(mcp_servers))))
    return folder
