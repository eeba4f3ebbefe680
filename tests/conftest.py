"""Shared test setup: anyio on asyncio (Slack Bolt and matrix-nio run on asyncio)."""

from __future__ import annotations

import logging
import operator
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import bridge.app
from bridge.agy.capabilities import Capabilities
from tests.ordering import spread_slow
from tests.pg import Postgres, PostgresError, postgres_bin, shared_postgres, start_shared
from tests.store_template import migrated_once

# anyio's plugin, without the trio import it would make (tests/anyio_asyncio.py); each test's
# wall and CPU time, each worker's CPU total, the CPU budget (`make test-profile`); the servers
# the workers share (one Synapse, one PostgreSQL per run); each test module's bytecode written
# once before the workers start; each test's deadline for the hang guards inside it.
pytest_plugins = [
    "tests.anyio_asyncio",
    "anyio.pytest_plugin",
    "tests.profiling",
    "tests.shared_servers",
    "tests.bytecode",
    "tests.deadline",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tier spread over the workers' first tests (tests/ordering.py): each worker
    starts with its part of the long tests and the quick ones even out the end."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = spread_slow(items, lambda item: item.get_closest_marker("slow") is not None, workers)


@pytest.fixture(scope="session", autouse=True)
def sqlite_stores_from_a_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A new SQLite store starts as a copy of one this worker migrated (tests/store_template.py):
    10 ms of CPU for every bridge a test opens, about 1.8 ms with the copy."""
    with migrated_once(tmp_path_factory.mktemp("store-template")):
        yield


# -- PostgreSQL (the shared store of several instances) --------------------------------------

PG_SKIP_REASON = (
    "PostgreSQL is not installed, so the PostgreSQL store's tests did not run (the store "
    "contract on PostgreSQL, several instances, leases, failover): run `make test` as root, "
    "which installs Debian's postgresql, or set AGY_BRIDGE_PG_BIN to a directory with initdb"
)


@pytest.fixture(scope="session")
def postgres(request: pytest.FixtureRequest) -> Postgres:
    """The run's one PostgreSQL server, shared by every worker (tests/shared_servers.py: the
    first worker that needs it starts it, the run's end stops it); tests take fresh databases
    from it."""
    bindir = postgres_bin()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the PostgreSQL tests: " + PG_SKIP_REASON, pytrace=False)
        pytest.skip(PG_SKIP_REASON)
    # Imported here: tests.shared_servers is a plugin (below), whose asserts pytest rewrites
    # only if it imports the module first.
    from tests.shared_servers import run_of

    failure = ""
    try:
        record = run_of(request.config).shared("postgres", lambda run: start_shared(bindir, run))
    except PostgresError as exc:
        failure = str(exc)
    if failure:
        pytest.fail(f"PostgreSQL did not start ({bindir}):\n{failure}", pytrace=False)
    return shared_postgres(record)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store opens, once per backend: the store contract holds on both."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db.sqlite3'}"
    server: Postgres = request.getfixturevalue("postgres")
    return server.new_database(migrated=True)  # the contract, not the migrations


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``agy-bridge``'s own command run in the test's process sets up logging for a process
    (the root logger's handlers and level, quieter third-party loggers): put it back, or later
    tests in the same worker would log nowhere pytest sees. A logger first made meanwhile (by
    ``setup_logging`` quieting one not yet imported, such as uvicorn's) goes back to no level of
    its own: left at WARNING it would hide a later test's records."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in logging.root.manager.loggerDict}
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name in list(logging.root.manager.loggerDict):
            logging.getLogger(name).setLevel(levels.get(name, logging.NOTSET))


_LOGGER_STATE = operator.attrgetter("level", "propagate", "disabled")
_HANDLERS = operator.attrgetter("handlers")


def _loggers() -> list[logging.Logger]:
    return [
        log for log in logging.root.manager.loggerDict.values() if isinstance(log, logging.Logger)
    ]


@pytest.fixture(autouse=True)
def loggers_as_found() -> Iterator[None]:
    """Every named logger goes back to its level, ``propagate``, ``disabled`` and handlers.

    A test that starts uvicorn with its default logging (``dictConfig``) makes ``uvicorn``
    stop propagating and ``uvicorn.error`` log only warnings for the rest of the worker: a
    later test there that reads uvicorn's records through ``caplog`` finds none, and which
    test runs after which depends on how many workers share the suite. A logger first made
    during the test goes back to what it was before it existed (no level, handlers of its
    own, propagating). Only what changed is set again (``setLevel`` clears every logger's
    cache). Compared first in one pass at C speed (0.15 ms a test against 0.5 ms with about
    240 loggers in a worker), and logger by logger only when something changed."""
    manager = logging.root.manager
    loggers = _loggers()
    states = list(map(_LOGGER_STATE, loggers))
    handler_lists = list(map(list, map(_HANDLERS, loggers)))
    yield
    now = _loggers()
    if (
        now == loggers
        and list(map(_LOGGER_STATE, now)) == states
        and list(map(_HANDLERS, now)) == handler_lists
    ):
        return
    found = {
        log.name: (*state, were)
        for log, state, were in zip(loggers, states, handler_lists, strict=True)
    }
    for name, log in list(manager.loggerDict.items()):
        if not isinstance(log, logging.Logger):
            continue
        level, propagate, disabled, handlers = found.get(name, (logging.NOTSET, True, False, []))
        if log.level != level:
            log.setLevel(level)
        log.propagate, log.disabled = propagate, disabled
        if log.handlers != handlers:
            log.handlers[:] = handlers


# The simulator as the tests' configs name it (tests/core/harness.SIMULATOR).
_SIMULATOR = (sys.executable, "-m", "bridge.simulator")


@pytest.fixture(scope="session")
def _simulator_capabilities() -> dict[tuple[object, ...], Capabilities]:
    return {}


@pytest.fixture(autouse=True)
def simulator_probed_once_per_worker(
    monkeypatch: pytest.MonkeyPatch, _simulator_capabilities: dict[tuple[object, ...], Capabilities]
) -> None:
    """Every bridge a test opens in its own process asks agy's ``--help`` and ``--version``:
    two simulator processes, about 0.18 s of CPU, hundreds of times a run. The simulator's
    answers depend only on its ``AGY_SIM_HELP_OMIT``, so a worker asks once per value and
    gives later bridges the same capabilities. Any other command (the fake agys of the probe's
    own tests, a sandbox's wrapper) is asked every time; ``bridge.agy.capabilities.probe``
    itself, which the capability tests call, is untouched, as is a `python -m bridge`."""
    real = bridge.app.probe

    async def probe(command: Sequence[str], seconds: float) -> Capabilities:
        if tuple(command) != _SIMULATOR:
            return await real(command, seconds)
        # Not the deadline: it is each config's init_timeout now, and only answers are kept.
        key = (os.environ.get("AGY_SIM_HELP_OMIT"),)
        if key in _simulator_capabilities:
            return _simulator_capabilities[key]
        caps = await real(command, seconds)
        if caps.probed:  # a probe that failed on a loaded machine is not kept
            _simulator_capabilities[key] = caps
        return caps

    monkeypatch.setattr(bridge.app, "probe", probe)
