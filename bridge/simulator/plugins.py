"""Plugins found in ``--add-dir`` workspaces, read as strictly as agy reads them.

Layout: ``<dir>/.agents/plugins/<name>/`` with ``plugin.json``, ``hooks.json``,
``mcp_config.json`` and ``rules/*.md``. What agy does with a wrong file (measured on real
builds, see docs/agy.md) is what happens here:

- ``plugin.json`` names the plugin; a name outside ``[A-Za-z0-9_-]`` refuses the plugin.
- ``hooks.json`` is a map of NAMED bundles; a flat ``{"PreInvocation": [...]}`` is inert (the
  event name is read as a bundle name, and its list is no bundle), also beside real bundles;
  a top-level ``enabled`` key disables the file, a bundle's ``"enabled": false`` disables that
  bundle, any parse error drops the whole file. Tool events (``PreToolUse``) take matcher
  groups: ``[{"matcher": "run_command", "hooks": [handler, ...]}]``, ``"*"`` for every tool.
- ``mcp_config.json``: an entry without a string ``serverUrl`` is dropped silently (``url`` only
  on builds that accept it), but a syntax error is fatal for the whole process
  (:class:`FatalConfigError`).
- a rule file without ``trigger: always_on`` front matter is not applied; one over 24,000 bytes
  is cut there.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from bridge.simulator.record import field, record

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Warn = Callable[[str], None]

FLAT_EVENTS = ("SessionStart", "PreInvocation", "PostInvocation", "Stop")
TOOL_EVENTS = ("PreToolUse", "PostToolUse")
RULE_LIMIT = 24_000
DEFAULT_HOOK_TIMEOUT = 30
_PLUGIN_NAME = re.compile(r"[A-Za-z0-9_-]+")
# YAML front matter at the very start of a rule file: ``---``, key lines, ``---``.
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)
_ALWAYS_ON = re.compile(r"""^trigger[ \t]*:[ \t]*(["']?)always_on\1[ \t]*$""", re.MULTILINE)


class FatalConfigError(Exception):
    """A plugin file so broken that agy refuses to run at all."""


class _HooksFileError(Exception):
    pass


@record(frozen=True)
class HookHandler:
    command: str
    timeout: float  # seconds
    cwd: Path  # the folder holding hooks.json
    bundle: str
    # How agy names the handler in its errors: jsonhook__<bundle>_<event>_<group>_<handler>.
    name: str = ""


@record(frozen=True)
class ToolHookGroup:
    """The handlers of a tool event for the tools ``matcher`` names."""

    matcher: str  # a tool's name as agy calls it, or "*"
    handlers: tuple[HookHandler, ...]

    def matches(self, tool: str) -> bool:
        return self.matcher == "*" or self.matcher == tool


@record
class HookSet:
    flat: dict[str, list[HookHandler]] = field(default_factory=dict)
    tool: dict[str, list[ToolHookGroup]] = field(default_factory=dict)


@record(frozen=True)
class McpServer:
    name: str  # "<plugin>_<server>", as the agent sees it
    bare_name: str
    url: str


@record(frozen=True)
class Rule:
    path: Path
    text: str
    truncated: bool


@record
class Plugin:
    name: str
    root: Path
    hooks: dict[str, list[HookHandler]] = field(default_factory=dict)
    tool_hooks: dict[str, list[ToolHookGroup]] = field(default_factory=dict)
    mcp_servers: list[McpServer] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)


def load_plugins(add_dirs: list[str], warn: Warn, *, accept_url: bool = False) -> list[Plugin]:
    """Plugins of every absolute workspace. ``accept_url``: this build also reads ``url`` in
    ``mcp_config.json`` (later builds do; the documented key is ``serverUrl``)."""
    plugins: list[Plugin] = []
    for directory in add_dirs:
        if not os.path.isabs(directory):
            # Real agy in print mode loads plugins only from absolute workspace paths.
            warn(f"warning: workspace {directory!r} is not absolute: its plugins are not loaded")
            continue
        base = Path(directory, ".agents", "plugins")
        if not base.is_dir():
            continue
        for root in sorted(p for p in base.iterdir() if p.is_dir()):
            plugin = load_plugin(root, warn, accept_url=accept_url)
            if plugin is not None:
                plugins.append(plugin)
    return plugins


GLOBAL = "global"


def load_global(home: Path, warn: Warn, *, accept_url: bool = False) -> Plugin | None:
    """What agy loads from its own state directory for every workspace: global rules
    (``GEMINI.md``, applied whatever its front matter) and MCP servers (``mcp_config.json``,
    under their own names). None when there is neither."""
    rules = []
    path = home / "GEMINI.md"
    if path.is_file():
        data = path.read_bytes()
        truncated = len(data) > RULE_LIMIT
        if truncated:
            warn(f"warning: rule file {path} is {len(data)} bytes; cut at {RULE_LIMIT} bytes")
            data = data[:RULE_LIMIT]
        rules.append(Rule(path=path, text=data.decode("utf-8", "replace"), truncated=truncated))
    servers = []
    mcp_path = home / "mcp_config.json"
    if mcp_path.is_file():
        servers = [
            McpServer(name=server.bare_name, bare_name=server.bare_name, url=server.url)
            for server in parse_mcp_config(mcp_path, GLOBAL, accept_url=accept_url)
        ]
    if not rules and not servers:
        return None
    return Plugin(name=GLOBAL, root=home, mcp_servers=servers, rules=rules)


def load_plugin(root: Path, warn: Warn, *, accept_url: bool = False) -> Plugin | None:
    name = _plugin_name(root / "plugin.json", warn)
    if name is None:
        return None
    plugin = Plugin(name=name, root=root)
    hooks_path = root / "hooks.json"
    if hooks_path.is_file():
        try:
            parsed = parse_hook_file(hooks_path.read_bytes(), root)
            plugin.hooks, plugin.tool_hooks = parsed.flat, parsed.tool
        except _HooksFileError as exc:
            warn(f"warning: ignoring hooks file {hooks_path}: {exc}")
    mcp_path = root / "mcp_config.json"
    if mcp_path.is_file():
        plugin.mcp_servers = parse_mcp_config(mcp_path, name, accept_url=accept_url)
    plugin.rules = load_rules(root / "rules", warn)
    return plugin


def _plugin_name(path: Path, warn: Warn) -> str | None:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        warn(f"warning: skipping plugin {path.parent}: no plugin.json")
        return None
    except (OSError, ValueError) as exc:
        warn(f"warning: skipping plugin {path.parent}: bad plugin.json: {exc}")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        warn(f'warning: skipping plugin {path.parent}: plugin.json needs a string "name"')
        return None
    name = str(data["name"])
    if not _PLUGIN_NAME.fullmatch(name):
        warn(
            f"warning: skipping plugin {path.parent}: invalid plugin name {name!r} "
            "(only letters, digits, '_' and '-')"
        )
        return None
    return name


def parse_hooks(raw: bytes, cwd: Path) -> dict[str, list[HookHandler]]:
    """Handlers per flat event; raise ``_HooksFileError`` when agy would drop the file."""
    return parse_hook_file(raw, cwd).flat


def parse_hook_file(raw: bytes, cwd: Path) -> HookSet:
    """Every handler of a hooks.json; raise ``_HooksFileError`` when agy would drop the file."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _HooksFileError(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _HooksFileError("top level is not an object")
    if "enabled" in data:
        # A top-level "enabled" switch turns the whole file off, whatever its value.
        return HookSet()
    hooks = HookSet()
    for bundle, events in data.items():
        if not isinstance(events, dict):
            # A flat {"PreInvocation": [...]} lands here: a bundle that holds no event map. It
            # is inert, and the named bundles beside it still load.
            continue
        enabled = events.get("enabled", True)
        if not isinstance(enabled, bool):
            raise _HooksFileError(f"{bundle}.enabled is not a boolean")
        if not enabled:
            continue  # "enabled": false switches this bundle off
        for event, handlers in events.items():
            if event in FLAT_EVENTS:
                hooks.flat.setdefault(event, []).extend(_handlers(bundle, event, handlers, cwd))
            elif event in TOOL_EVENTS:
                hooks.tool.setdefault(event, []).extend(_groups(bundle, event, handlers, cwd))
    return hooks


def _groups(bundle: str, event: str, raw: Any, cwd: Path) -> list[ToolHookGroup]:
    if not isinstance(raw, list):
        raise _HooksFileError(f"{bundle}.{event} is not a list of matcher groups")
    groups = []
    for number, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _HooksFileError(f"{bundle}.{event} holds a matcher group that is not an object")
        # Go's zero value: a group without a matcher matches no tool.
        matcher = item.get("matcher", "")
        if not isinstance(matcher, str):
            raise _HooksFileError(f"{bundle}.{event}: matcher must be a string")
        label = f"{event}_{number}"
        handlers = _handlers(bundle, label, item.get("hooks", []), cwd)
        groups.append(ToolHookGroup(matcher=matcher, handlers=tuple(handlers)))
    return groups


def _handlers(bundle: str, event: str, raw: Any, cwd: Path) -> list[HookHandler]:
    if not isinstance(raw, list):
        raise _HooksFileError(f"{bundle}.{event} is not a list of handlers")
    handlers = []
    for number, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _HooksFileError(f"{bundle}.{event} holds a handler that is not an object")
        kind, command = item.get("type", ""), item.get("command")
        timeout = item.get("timeout", DEFAULT_HOOK_TIMEOUT)
        if not isinstance(kind, str) or not isinstance(command, str):
            raise _HooksFileError(f"{bundle}.{event}: type and command must be strings")
        # Go unmarshals the timeout into an integer: a float or a string is a parse error.
        if isinstance(timeout, bool) or not isinstance(timeout, int):
            raise _HooksFileError(f"{bundle}.{event}: timeout must be an integer (seconds)")
        if kind != "command":
            continue  # only command handlers run; one without a type is not one
        seconds = timeout if timeout > 0 else DEFAULT_HOOK_TIMEOUT
        name = f"jsonhook__{bundle}_{event}_{number}"
        handlers.append(
            HookHandler(command=command, timeout=seconds, cwd=cwd, bundle=bundle, name=name)
        )
    return handlers


def parse_mcp_config(path: Path, plugin: str, *, accept_url: bool = False) -> list[McpServer]:
    try:
        data = json.loads(path.read_bytes())
    except ValueError as exc:
        raise FatalConfigError(f"failed to parse MCP config {path}: {exc}") from None
    except OSError as exc:
        raise FatalConfigError(f"failed to read MCP config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise FatalConfigError(f"failed to parse MCP config {path}: top level is not an object")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise FatalConfigError(f"failed to parse MCP config {path}: mcpServers is not an object")
    found = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            continue
        # The documented key is serverUrl ("legacy url/httpUrl are not supported"); later
        # builds read url too.
        url = entry.get("serverUrl")
        if url is None and accept_url:
            url = entry.get("url")
        if not isinstance(url, str) or not url:
            continue
        found.append(McpServer(name=f"{plugin}_{name}", bare_name=name, url=url))
    return found


def load_rules(folder: Path, warn: Warn) -> list[Rule]:
    """The rules agy applies to every turn: those with ``trigger: always_on`` front matter.

    A rule file without it (or with another trigger) is silently not applied in print mode.
    """
    if not folder.is_dir():
        return []
    rules = []
    for path in sorted(folder.glob("*.md")):
        data = path.read_bytes()
        if not is_always_on(data):
            continue
        truncated = len(data) > RULE_LIMIT
        if truncated:
            warn(f"warning: rule file {path} is {len(data)} bytes; cut at {RULE_LIMIT} bytes")
            data = data[:RULE_LIMIT]
        rules.append(Rule(path=path, text=data.decode("utf-8", "replace"), truncated=truncated))
    return rules


def is_always_on(data: bytes) -> bool:
    """Whether a rule file starts with front matter that says ``trigger: always_on``."""
    match = _FRONT_MATTER.match(data.decode("utf-8", "replace"))
    return match is not None and _ALWAYS_ON.search(match.group(1)) is not None
