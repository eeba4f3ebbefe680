"""A real Synapse homeserver on loopback for the Matrix tests.

`make synapse` installs Synapse into its own virtualenv and `make test` names its python in
``AGY_BRIDGE_SYNAPSE_PYTHON``. :func:`start_synapse` writes a ``homeserver.yaml`` (SQLite, one
client listener on 127.0.0.1, no federation and no federation sender, cheap bcrypt), starts
the server on a port the OS picked, waits until ``/_matrix/client/versions`` answers and hands
back a :class:`Synapse` that registers users through the shared-secret admin API. Everything
here is synchronous (subprocess and urllib) so session-scoped fixtures can use it without an
event loop.

:func:`start_shared` starts the one homeserver a test run shares (tests/shared_servers.py): every
xdist worker's users on one server, so each user gets a name no other worker gives; its
database lives in memory (it is never started again on its data). It keeps Synapse's default
limits on what is counted per user (:data:`PER_USER_DEFAULTS`: messages, room creation,
joins) and lifts them for each user it registers (the admin API's ``override_ratelimit``),
except through the view :meth:`Synapse.with_default_limits` hands the tests that are about
those limits: their users meet Synapse's defaults. What is counted per address (logins,
registrations: every test comes from 127.0.0.1) stays raised.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.ports import free_port as _free_port

if TYPE_CHECKING:
    from tests.shared_servers import Run

PYTHON_ENV = "AGY_BRIDGE_SYNAPSE_PYTHON"
SERVER_NAME = "localhost"
_READY_TIMEOUT = 90.0
_STOP_TIMEOUT = 20.0
_START_ATTEMPTS = 3
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

# Raised so that ordinary tests never meet a 429; one test runs with Synapse's defaults.
_UNLIMITED = {"per_second": 1000, "burst_count": 1000}
RAISED_RATE_LIMITS: dict[str, Any] = {
    "rc_message": _UNLIMITED,
    "rc_registration": _UNLIMITED,
    "rc_login": {
        "address": _UNLIMITED,
        "account": _UNLIMITED,
        "failed_attempts": _UNLIMITED,
    },
    "rc_joins": {"local": _UNLIMITED, "remote": _UNLIMITED},
    "rc_joins_per_room": _UNLIMITED,
    "rc_invites": {"per_room": _UNLIMITED, "per_user": _UNLIMITED, "per_issuer": _UNLIMITED},
    "rc_room_creation": _UNLIMITED,
    "rc_media_create": _UNLIMITED,
    "rc_key_requests": _UNLIMITED,
}
# Counted per user, and lifted per user by the admin API: the shared server keeps Synapse's
# defaults for these, so the users of the default-limits tests meet them.
PER_USER_DEFAULTS = ("rc_message", "rc_room_creation", "rc_joins")


class SynapseError(RuntimeError):
    """Synapse did not start or did not answer; the message carries its log tail."""


@dataclass(frozen=True)
class MatrixUser:
    user_id: str
    password: str
    access_token: str
    device_id: str

    @property
    def localpart(self) -> str:
        return self.user_id.split(":", 1)[0].lstrip("@")


@dataclass
class Synapse:
    """One running homeserver."""

    base_url: str
    workdir: Path
    shared_secret: str
    # None for the run's shared server: this process did not start it, and may not stop it.
    process: subprocess.Popen[bytes] | None
    server_name: str = SERVER_NAME
    # The shared server's admin, who lifts each new user's per-user limits.
    admin_token: str | None = None
    lift_limits: bool = True
    _counter: int = field(default=0, repr=False)

    def unique_localpart(self, prefix: str) -> str:
        # Users live as long as the server, which every worker shares: every test gets fresh
        # names, and the pid keeps two workers' counters apart.
        self._counter += 1
        return f"{prefix}{self._counter}x{os.getpid():x}x{secrets.token_hex(3)}"

    def with_default_limits(self) -> Synapse:
        """The same server, registering users who meet Synapse's default per-user limits."""
        return Synapse(
            base_url=self.base_url,
            workdir=self.workdir,
            shared_secret=self.shared_secret,
            process=self.process,
            server_name=self.server_name,
            admin_token=self.admin_token,
            lift_limits=False,
        )

    def register(
        self,
        prefix: str,
        *,
        password: str | None = None,
        displayname: str | None = None,
        admin: bool = False,
    ) -> MatrixUser:
        """Create a user through the shared-secret admin API; returns its first login."""
        localpart = self.unique_localpart(prefix)
        password = password or secrets.token_urlsafe(12)
        nonce = _request_json("GET", f"{self.base_url}/_synapse/admin/v1/register")["nonce"]
        mac = hmac.new(self.shared_secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), localpart.encode(), password.encode()]))
        mac.update(b"\x00admin" if admin else b"\x00notadmin")
        body: dict[str, Any] = {
            "nonce": nonce,
            "username": localpart,
            "password": password,
            "admin": admin,
            "mac": mac.hexdigest(),
        }
        if displayname:
            body["displayname"] = displayname
        answer = _request_json("POST", f"{self.base_url}/_synapse/admin/v1/register", body)
        if self.admin_token is not None and self.lift_limits:
            _request_json(
                "POST",
                f"{self.base_url}/_synapse/admin/v1/users/{answer['user_id']}/override_ratelimit",
                {"messages_per_second": 0, "burst_count": 0},
                token=self.admin_token,
            )
        return MatrixUser(
            user_id=answer["user_id"],
            password=password,
            access_token=answer["access_token"],
            device_id=answer["device_id"],
        )

    def login(self, user: MatrixUser) -> MatrixUser:
        """Another login of ``user`` with the password: a new device, as a second client."""
        answer = _request_json(
            "POST",
            f"{self.base_url}/_matrix/client/v3/login",
            {
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": user.user_id},
                "password": user.password,
            },
        )
        return MatrixUser(
            user_id=answer["user_id"],
            password=user.password,
            access_token=answer["access_token"],
            device_id=answer["device_id"],
        )

    def log_tail(self, lines: int = 60) -> str:
        return _log_tail(self.workdir, lines)

    def stop(self) -> None:
        _terminate(self._own())

    def _own(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            raise SynapseError(
                "the run's shared homeserver ends with the run: for an outage, take its address "
                "away (tests/chat/matrix/outage.py)"
            )
        return self.process


def synapse_python() -> str | None:
    """The python of Synapse's virtualenv, or None when the tests were not started by make."""
    value = os.environ.get(PYTHON_ENV, "").strip()
    return value or None


def start_synapse(
    python: str,
    workdir: Path,
    *,
    raised_limits: bool = True,
    default_limits: tuple[str, ...] = (),
    on_spawn: Callable[[int], None] | None = None,
    in_memory: bool = False,
) -> Synapse:
    """Start Synapse in ``workdir``; raise :class:`SynapseError` with its log tail on failure.

    With ``raised_limits``, the limits named in ``default_limits`` (e.g. ``rc_message``) keep
    Synapse's defaults. ``on_spawn`` is told each server process's pid as soon as it exists.
    ``in_memory`` keeps the database in the server's memory (see :func:`_write_config`): for a
    server that is never started again on the same data."""
    workdir.mkdir(parents=True, exist_ok=True)
    last_error = ""
    for _ in range(_START_ATTEMPTS):
        port = _free_port()
        secret = secrets.token_hex(16)
        config_path = _write_config(
            workdir, port, secret, raised_limits, default_limits, in_memory=in_memory
        )
        process = _spawn(python, config_path, workdir)
        if on_spawn is not None:
            on_spawn(process.pid)
        base_url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(base_url, process, workdir)
        except SynapseError as exc:
            _terminate(process)
            last_error = str(exc)
            # Another process may have taken the port between our probe and Synapse's bind.
            if "Address already in use" in last_error:
                continue
            raise
        return Synapse(base_url=base_url, workdir=workdir, shared_secret=secret, process=process)
    raise SynapseError(last_error)


def start_shared(python: str, workdir: Path, run: Run) -> dict[str, Any]:
    """Start the run's shared homeserver (owned by ``run``); the record that reaches it."""
    server = start_synapse(
        python,
        workdir,
        default_limits=PER_USER_DEFAULTS,
        on_spawn=lambda pid: run.register(pid, signal.SIGTERM),
        # It lives as long as the run and is never restarted: nothing to keep on disk.
        in_memory=True,
    )
    admin = server.register("admin", admin=True)
    return {
        "base_url": server.base_url,
        "workdir": str(server.workdir),
        "shared_secret": server.shared_secret,
        "admin_token": admin.access_token,
    }


def shared_synapse(record: dict[str, Any]) -> Synapse:
    """The run's shared homeserver, from its record."""
    return Synapse(
        base_url=record["base_url"],
        workdir=Path(record["workdir"]),
        shared_secret=record["shared_secret"],
        process=None,
        admin_token=record["admin_token"],
    )


def _write_config(
    workdir: Path,
    port: int,
    secret: str,
    raised_limits: bool,
    default_limits: tuple[str, ...],
    *,
    in_memory: bool = False,
) -> Path:
    log_config = workdir / "log.yaml"
    # JSON is YAML: no YAML library needed on this side.
    log_config.write_text(
        json.dumps(
            {
                "version": 1,
                "formatters": {
                    "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
                },
                "handlers": {
                    "file": {
                        "class": "logging.FileHandler",
                        "formatter": "plain",
                        "filename": str(workdir / "homeserver.log"),
                    }
                },
                "root": {"level": "INFO", "handlers": ["file"]},
                "disable_existing_loggers": False,
            }
        )
    )
    config: dict[str, Any] = {
        "server_name": SERVER_NAME,
        "pid_file": str(workdir / "homeserver.pid"),
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        # Synapse's SQLite runs in WAL mode with SQLite's default synchronous=FULL: every
        # commit (several per event sent) is an fsync of the disk, CPU in the kernel and a
        # wait that holds Synapse's one database thread. ``:memory:`` has neither; Synapse
        # builds its schema in it at start, as for its own unit tests (one connection only).
        "database": {
            "name": "sqlite3",
            "args": {"database": ":memory:" if in_memory else str(workdir / "homeserver.db")},
        },
        "log_config": str(log_config),
        "media_store_path": str(workdir / "media"),
        "signing_key_path": str(workdir / "signing.key"),
        "registration_shared_secret": secret,
        "macaroon_secret_key": secrets.token_hex(16),
        "form_secret": secrets.token_hex(16),
        "enable_registration": False,
        "bcrypt_rounds": 4,
        "trusted_key_servers": [],
        "federation_domain_whitelist": [],
        "suppress_key_server_warning": True,
        "presence": {"enabled": False},
        # No federation: without a sender, each event no longer wakes the federation sender's
        # loop to find that it has no other server to send to (a few % of an event's CPU).
        "federation_sender_instances": [],
        "report_stats": False,
        "url_preview_enabled": False,
        "enable_metrics": False,
    }
    if raised_limits:
        config.update({k: v for k, v in RAISED_RATE_LIMITS.items() if k not in default_limits})
    path = workdir / "homeserver.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def _spawn(python: str, config_path: Path, workdir: Path) -> subprocess.Popen[bytes]:
    out = (workdir / "synapse.out").open("ab")
    try:
        return subprocess.Popen(
            [python, "-m", "synapse.app.homeserver", "-c", str(config_path)],
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        out.close()


def _wait_ready(base_url: str, process: subprocess.Popen[bytes], workdir: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SynapseError(
                f"Synapse exited with code {process.returncode} before it was ready:\n"
                + _log_tail(workdir)
            )
        try:
            with urllib.request.urlopen(f"{base_url}/_matrix/client/versions", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise SynapseError(
        f"Synapse did not answer within {_READY_TIMEOUT:.0f} s:\n" + _log_tail(workdir)
    )


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=_STOP_TIMEOUT)


def _log_tail(workdir: Path, lines: int = 60) -> str:
    parts = []
    for name in ("synapse.out", "homeserver.log"):
        path = workdir / name
        if path.exists():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {name} (last {len(text)} lines) ---\n" + "\n".join(text))
    return "\n".join(parts) or "(no log written)"


def _request_json(
    method: str, url: str, body: dict[str, Any] | None = None, *, token: str | None = None
) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise SynapseError(f"{method} {url}: HTTP {exc.code}: {exc.read()[:500]!r}") from None
