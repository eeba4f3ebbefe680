"""A real git remote over smart HTTP: ``git http-backend`` (CGI) behind a small aiohttp server
that asks for Basic credentials, as a forge's git endpoint does.

``file://`` never asks for credentials, so it would not exercise the bridge's credential helper:
here a push without the right password is answered 401, as GitHub and GitLab answer it.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import anyio
from aiohttp import web


class GitHttpServer:
    """Bare repositories under ``root`` (``<owner>/<name>.git``), served at ``url``."""

    def __init__(self, root: Path, password: str, user: str = "x-access-token") -> None:
        self.root = root
        self.password = password
        self.user = user
        self.url = ""
        # (method, path, authenticated) of every request, for tests.
        self.requests: list[tuple[str, str, bool]] = []
        # Seconds each request waits before it is answered (a slow remote, for scans).
        self.delay = 0.0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{path:.*}", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def create(self, repo: str, seed: Path | None = None, branch: str = "main") -> Path:
        """A bare repository ``repo`` ("owner/name"); ``seed``'s ``branch`` pushed into it."""
        bare = self.root / f"{repo}.git"
        bare.parent.mkdir(parents=True, exist_ok=True)
        git("init", "-q", "--bare", "-b", branch, str(bare))
        if seed is not None:
            git("-C", str(seed), "push", "-q", str(bare), f"{branch}:refs/heads/{branch}")
        return bare

    def remote(self, repo: str) -> str:
        return f"{self.url}/{repo}.git"

    def branch_sha(self, repo: str, branch: str) -> str | None:
        bare = self.root / f"{repo}.git"
        done = subprocess.run(
            ["git", "--git-dir", str(bare), "rev-parse", "-q", "--verify", f"refs/heads/{branch}"],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() or None

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        return user == self.user and password == self.password

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        authorized = self._authorized(request)
        if self.delay:
            await anyio.sleep(self.delay)
        self.requests.append((request.method, request.path, authorized))
        if not authorized:
            return web.Response(
                status=401,
                text="Authentication required\n",
                headers={"WWW-Authenticate": 'Basic realm="git"'},
            )
        body = await request.read()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": self.user,
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query_string,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.root),
        }
        if encoding := request.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = encoding
        if protocol := request.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = protocol
        done = await anyio.run_process(["git", "http-backend"], input=body, env=env, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _ and b"\n\n" in done.stdout:
            head, _, payload = done.stdout.partition(b"\n\n")
        status = 200
        headers: dict[str, str] = {}
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers[name.strip()] = value.strip()
        return web.Response(status=status, body=payload, headers=headers)


def git(*args: str, cwd: Path | None = None) -> str:
    """A plain git for test set-up (the operator's git, not the bridge's)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "Op",
        "GIT_AUTHOR_EMAIL": "op@example.com",
        "GIT_COMMITTER_NAME": "Op",
        "GIT_COMMITTER_EMAIL": "op@example.com",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr}")
    return done.stdout.strip()
