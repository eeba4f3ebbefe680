"""A real PostgreSQL on loopback for the store's tests, started the way Synapse is.

`make test` installs Debian's ``postgresql`` package where no server binaries are found (as root,
as CI runs). :func:`start_postgres` runs ``initdb`` in a temporary directory and the server on a
free loopback port (no fsync: the data is thrown away), as the ``postgres`` user (or ``nobody``)
when the suite runs as root, since PostgreSQL refuses to run as root. Each test gets its own
database from :meth:`Postgres.new_database`. Synchronous (subprocess), for session fixtures.

The server runs in a session of its own (a Ctrl-C at the terminal is the test run's, not the
server's), so nothing that ends the test run's process group reaches it: a run killed at its
time limit (``make mutate``) would leave it running. It is started with a parent-death signal
instead (``setpriv --pdeathsig``): when the thread that started it ends, it gets SIGINT, its
fast shutdown. So call :func:`start_postgres` from a thread that outlives the server (the main
thread; not a worker thread of a pool).

The suite's one server, shared by every xdist worker (:func:`start_shared`), is the run's instead
(tests/shared_servers.py): no parent-death signal (a worker that crashes must not take it from the
others), registered as soon as it is spawned, stopped when the run ends.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import psycopg

from tests.ports import free_port as _free_port

if TYPE_CHECKING:
    from tests.shared_servers import Run

BIN_ENV = "AGY_BRIDGE_PG_BIN"
_READY_TIMEOUT = 60.0
_STOP_TIMEOUT = 20.0


class PostgresError(RuntimeError):
    """PostgreSQL did not start; the message carries its log tail."""


def postgres_bin() -> Path | None:
    """The directory with ``initdb`` and ``postgres``: $AGY_BRIDGE_PG_BIN, Debian's, or PATH."""
    if configured := os.environ.get(BIN_ENV):
        return Path(configured)
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[3]) if Path(p).parts[3].isdigit() else 0,
    )
    if debian:
        return Path(debian[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _run_as() -> tuple[list[str], int, int] | None:
    """(command prefix, uid, gid) to drop root; None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            continue
        # setpriv execs the server itself, so signals reach it (runuser would stay between).
        command = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
        return command, user.pw_uid, user.pw_gid
    raise PostgresError("running as root and neither a postgres nor a nobody user exists")


@dataclass
class Postgres:
    port: int
    workdir: Path
    # None for the run's shared server: this process did not start it, and may not stop it.
    process: subprocess.Popen[bytes] | None
    user: str = "bridge"
    _count: int = field(default=0, repr=False)
    _migrated: str | None = field(default=None, repr=False)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def new_database(self, *, migrated: bool = False) -> str:
        """A fresh, empty database; its URL (named apart from every other worker's).

        With ``migrated``, a copy of one this process migrated once with the store's own code:
        migrating a new database costs a test 25 ms of its own CPU and 0.2 s of wall (about
        fifty statements, each a round trip); the server copies the template in the same one
        statement that makes an empty one. The tests of the migrations themselves, and of
        instances starting together on a new store, ask for an empty one."""
        self._count += 1
        name = f"t{os.getpid()}_{self._count}"
        template = f" TEMPLATE {self._migrated_template()}" if migrated else ""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}{template}")
        return self.url(name)

    def _migrated_template(self) -> str:
        if self._migrated is None:
            name = f"t{os.getpid()}_migrated"
            with psycopg.connect(self.url(), autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name}")
                conn.execute(f"CREATE DATABASE {name}")
            # In a thread of its own: a test may ask from inside its event loop.
            with ThreadPoolExecutor(1) as pool:
                pool.submit(anyio.run, _migrate, self.url(name)).result()
            self._migrated = name
        return self._migrated

    def stop(self) -> None:
        if self.process is None:
            raise PostgresError("the run's shared PostgreSQL ends with the run")
        if self.process.poll() is None:
            # SIGINT: "fast shutdown" (ends sessions, no wait for clients).
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


async def _migrate(url: str) -> None:
    from bridge.core.store.opening import open_store  # the store only where a test asks

    async with open_store(url):
        pass


def start_postgres(
    bindir: Path, *, durable: bool = False, on_spawn: Callable[[int, Path], None] | None = None
) -> Postgres:
    """Tests run without fsync (the data is thrown away); ``durable`` keeps PostgreSQL's
    defaults, for benchmarks that compare against SQLite's fsync per commit. ``on_spawn``
    (the run's shared server) is told the server's pid and working directory as soon as it
    exists, and takes the place of the parent-death signal."""
    # Not under pytest's tmp (mode 0700 under root's tree): the server's user must reach it.
    workdir = Path(tempfile.mkdtemp(prefix="agy-bridge-pg-"))
    data, sock = workdir / "data", workdir / "sock"
    sock.mkdir()
    prefix: list[str] = []
    drop = _run_as()
    if drop is not None:
        prefix, uid, gid = drop
        for path in (workdir, sock):
            os.chown(path, uid, gid)
    log = workdir / "postgres.log"
    try:
        subprocess.run(
            [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "bridge", "-A", "trust",
             "-E", "UTF8", "--no-sync", "--no-instructions"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        output = getattr(exc, "stderr", b"") or b""
        shutil.rmtree(workdir, ignore_errors=True)
        raise PostgresError(f"initdb failed: {exc}\n{output.decode(errors='replace')}") from exc
    port = _free_port()
    fast = [] if durable else [
        "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
    ]  # fmt: skip
    # setpriv sets the signal after it changes the user (a change of user clears it).
    death = ["--pdeathsig", "SIGINT"] if shutil.which("setpriv") and on_spawn is None else []
    server_prefix = [*prefix, *death] if prefix else (["setpriv", *death] if death else [])
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*server_prefix, str(bindir / "postgres"), "-D", str(data), "-p", str(port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={sock}",
             *fast, "-c", "max_connections=300"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    if on_spawn is not None:
        on_spawn(process.pid, workdir)
    server = Postgres(port=port, workdir=workdir, process=process)
    deadline = time.monotonic() + _READY_TIMEOUT
    while True:
        try:
            with psycopg.connect(server.url(), connect_timeout=2):
                return server
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                server.stop()
                raise PostgresError(f"PostgreSQL did not start on port {port}:\n{tail}") from None
            time.sleep(0.2)


def start_shared(bindir: Path, run: Run) -> dict[str, Any]:
    """Start the run's shared server (owned by ``run``); the record that reaches it."""
    server = start_postgres(
        bindir, on_spawn=lambda pid, workdir: run.register(pid, signal.SIGINT, workdir)
    )
    return {"port": server.port, "workdir": str(server.workdir)}


def shared_postgres(record: dict[str, Any]) -> Postgres:
    return Postgres(port=record["port"], workdir=Path(record["workdir"]), process=None)
