"""A running bridge's real agy session, seen from outside: its URLs, read from its plugin files."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

PLUGIN = Path(".agents") / "plugins" / "bridge"


@dataclass(frozen=True)
class SessionUrls:
    hook: str
    mcp: str

    @property
    def port(self) -> int:
        port = urlsplit(self.hook).port
        assert port is not None
        return port

    @property
    def host(self) -> str:
        return urlsplit(self.hook).hostname or ""

    @property
    def token(self) -> str:
        return urlsplit(self.hook).path.split("/")[1]

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"


def plugin_dirs(data_dir: Path) -> list[Path]:
    return sorted(p.parent for p in (data_dir / "sessions").glob(f"*/{PLUGIN}/hooks.json"))


def session_urls(plugin_dir: Path) -> SessionUrls:
    """The hook URL the PreInvocation command reads (from its curl config file, named in the
    command), and the chat server's MCP URL."""
    hooks = json.loads((plugin_dir / "hooks.json").read_text())
    command = hooks["bridge"]["PreInvocation"][0]["command"]
    [url_file] = re.findall(r"-K (\S+\.curl)", command)
    [hook] = re.findall(r"http://[^\s'\"]+", Path(url_file.strip("'")).read_text())
    mcp = json.loads((plugin_dir / "mcp_config.json").read_text())
    return SessionUrls(hook=hook, mcp=mcp["mcpServers"]["chat"]["serverUrl"])


def tokens_in(data_dir: Path) -> set[str]:
    """Every listener token the session folders hold right now."""
    return {session_urls(folder).token for folder in plugin_dirs(data_dir)}
