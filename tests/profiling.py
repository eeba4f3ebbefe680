"""What the suite costs: each test's wall and CPU time, each worker's CPU total, a CPU budget.

Wall time on a shared or faster machine says little about a slower one; CPU time (the test
process and every child it waited for: the bridge, agy's simulator, Synapse, PostgreSQL) says
what a machine must compute, whatever else runs beside it. Loaded by tests/conftest.py.

    --profile                each test's wall and CPU time, then per worker: CPU total, how
                             long it ran, and the share of that time it spent in tests
    --cpu-budget=FILE|SECS   fail the run when the workers' CPU total is above the budget
                             (FILE: the first line `CPU budget: N s` in it, as in
                             docs/testing.md)

Machines of one kind differ in speed by about 1.75x, as much as a suite that grew by three
quarters. So the budget is in the CPU seconds of a reference machine: the budget line also
gives the time the reference machine took for a fixed piece of pure-Python work
(`calibration: C s`), the run measures the same work on its own machine, and the total is
scaled by the ratio before it is compared.

A process's CPU is counted while it runs below the test process and when it is waited for; a
grandchild left to init by a SIGKILLed parent is lost from then on (a few simulator processes of
the fault tests). Under pytest-xdist each
worker measures itself and hands its numbers to the controller at its end.
"""

from __future__ import annotations

import os
import re
import resource
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BUDGET_LINE = re.compile(
    r"CPU budget:\s*\*{0,2}\s*(\d+(?:\.\d+)?)\s*s\b\**"
    r"(?:[^\n]*?calibration:?\s*(\d+(?:\.\d+)?)\s*s\b)?"
)
WORKER_KEY = "agy_bridge_profile"
TOP = 30
SERVERS_TEARDOWN = "(a worker's last tear-down: its last test's fixtures, its session's servers)"


def cpu_seconds() -> float:
    """User and system time of this process, of the children it has waited for, and so far of
    its descendants still running (a session's Synapse and PostgreSQL: without them a test's
    share of a server's work would land on whichever test stops the server)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    return done + _running_descendants_cpu(os.getpid())


def own_cpu() -> float:
    """User and system time of this process alone: what pytest computed in-process (collection,
    the fakes, the in-process bridges, the tests themselves), no child."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


_TICK = os.sysconf("SC_CLK_TCK")


def _running_descendants_cpu(root: int) -> float:
    """The CPU of the live processes below ``root``: each one's own time and that of the
    children it reaped (Linux's /proc/PID/task/TID/children; nothing elsewhere)."""
    ticks = 0
    todo = _children(root)
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile: reaped, so in its parent's children time now
        # utime, stime, cutime, cstime: fields 14 to 17 of stat(5).
        ticks += sum(int(f) for f in fields[11:15])
        todo += _children(pid)
    return ticks / _TICK


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def process_start() -> float:
    """When this process started, on time.monotonic()'s clock (Linux: both count from boot)."""
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        return int(stat[19]) / _TICK
    except (OSError, ValueError, IndexError):
        return time.monotonic()


def _work() -> int:
    """A fixed piece of pure-Python work, like most of what the suite computes."""
    counts: dict[int, int] = {}
    for n in range(300_000):
        counts[n % 997] = counts.get(n % 997, 0) + n
    text = ",".join(str(n) for n in range(100_000))
    return len(sorted(text.split(","), key=len)) + len(counts)


def calibrate() -> float:
    """The CPU seconds this machine takes for `_work` (the best of five tries: a busy
    neighbour can only make one slower)."""
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        _work()
        best = min(best, time.process_time() - start)
    return best


@dataclass
class Budget:
    seconds: float
    # What the reference machine took for `_work`; None: the budget is not scaled.
    calibration: float | None = None


def read_budget(value: str) -> Budget:
    """A number of seconds, or the `CPU budget: N s (… calibration: C s)` line of a file."""
    try:
        return Budget(float(value))
    except ValueError:
        pass
    text = Path(value).read_text(encoding="utf-8")
    match = BUDGET_LINE.search(text)
    if match is None:
        raise pytest.UsageError(f"--cpu-budget: no line 'CPU budget: N s' in {value}")
    reference = match.group(2)
    return Budget(float(match.group(1)), float(reference) if reference else None)


@dataclass
class TestCost:
    nodeid: str
    wall: float
    cpu: float
    worker: str
    setup_cpu: float = 0.0  # the fixtures' set-up: what sharing could save
    own: float = 0.0  # of `cpu`, what the worker's own process computed (no child)

    @property
    def file(self) -> str:
        return self.nodeid.split("::", 1)[0]


@dataclass
class WorkerCost:
    name: str
    cpu: float  # from the worker's start to its end, set-up and tear-down of servers included
    wall: float
    in_tests: float  # wall time spent inside tests (set-up, call, tear-down)
    tests: int
    own: float = 0.0  # of `cpu`, the worker's own process (no child)
    collection: float = 0.0  # of `own`, before its first test: start-up, imports, collection


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("profile", "what the suite costs")
    group.addoption(
        "--profile",
        action="store_true",
        default=False,
        help="print each test's wall and CPU time and each worker's CPU total and busy share",
    )
    group.addoption(
        "--cpu-budget",
        default=None,
        metavar="FILE|SECONDS",
        help="fail when the workers' CPU total exceeds this (or the 'CPU budget: N s' of FILE)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Profiler(config), "agy_bridge_profiler")


def _worker_name(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    return str(workerinput["workerid"]) if workerinput else "main"


class Profiler:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.worker = _worker_name(config)
        self.is_worker = hasattr(config, "workerinput")
        self.tests: list[TestCost] = []
        self.workers: list[WorkerCost] = []
        # Workers are processes of their own: all their CPU, from interpreter start, counts.
        self.start_cpu = 0.0
        self.start_wall = min(process_start(), time.monotonic())
        self.in_tests = 0.0
        self.count = 0  # tests run
        # Each test's own costs, only for --profile.
        self.detail = bool(config.getoption("--profile"))
        self.budget: Budget | None = None
        option = config.getoption("--cpu-budget")
        if option:
            self.budget = read_budget(option)
        # This machine's speed, measured by the process that reports (not by each worker),
        # where the profile prints it or the budget is scaled by it (a budget in plain seconds
        # is not: five rounds of `_work` would only cost it).
        self.calibration = 0.0
        scaled = self.budget is not None and self.budget.calibration is not None
        if not self.is_worker and (config.getoption("--profile") or scaled):
            self.calibration = calibrate()
        self.controller_cpu = 0.0
        self.is_controller = False  # the xdist controller, once its workers reported
        self.last_wall = self.last_cpu = self.setup_cpu = 0.0
        self.collection: float | None = None  # own CPU when the first test began

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, None]:
        if self.collection is None:
            self.collection = own_cpu()
        if not self.detail:
            # The budget needs only the worker's total: no walk over /proc per test (with a
            # session's PostgreSQL and Synapse below the worker, each walk reads dozens of
            # processes' stat files; six walks a test cost about 4 ms).
            wall = time.monotonic()
            yield
            self.in_tests += time.monotonic() - wall
            self.count += 1
            return
        wall, cpu, own = time.monotonic(), cpu_seconds(), own_cpu()
        yield
        wall, cpu, own = time.monotonic() - wall, cpu_seconds() - cpu, own_cpu() - own
        self.in_tests += wall
        self.count += 1
        self.tests.append(
            TestCost(
                item.nodeid,
                wall - self.last_wall,
                cpu - self.last_cpu,
                self.worker,
                self.setup_cpu,
                own,
            )
        )
        if self.last_cpu > 0.05:
            # The worker's last tear-down stops its session-scoped servers (Synapse, PostgreSQL):
            # their whole CPU is counted when they are reaped, so it stands on its own line.
            self.tests.append(
                TestCost(SERVERS_TEARDOWN, self.last_wall, self.last_cpu, self.worker)
            )
        self.last_wall = self.last_cpu = self.setup_cpu = 0.0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, None]:
        if not self.detail:
            yield
            return
        cpu = cpu_seconds()
        yield
        self.setup_cpu = cpu_seconds() - cpu

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, None]:
        if not self.detail:
            yield
            return
        wall, cpu = time.monotonic(), cpu_seconds()
        yield
        if nextitem is None:
            self.last_wall, self.last_cpu = time.monotonic() - wall, cpu_seconds() - cpu

    def _own_cost(self) -> WorkerCost:
        return WorkerCost(
            self.worker,
            cpu_seconds() - self.start_cpu,
            time.monotonic() - self.start_wall,
            self.in_tests,
            self.count,
            own_cpu(),
            self.collection if self.collection is not None else own_cpu(),
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            # Session-scoped servers are torn down by now: their CPU is in this total.
            cost = self._own_cost()
            session.config.workeroutput[WORKER_KEY] = {  # type: ignore[attr-defined]
                "worker": vars(cost),
                "tests": [vars(t) for t in self.tests],
            }
            return
        if not self.workers:
            self.workers.append(self._own_cost())
        else:
            # Its own time only: its children are the workers, counted above.
            own = resource.getrusage(resource.RUSAGE_SELF)
            self.controller_cpu = own.ru_utime + own.ru_stime
            self.is_controller = True
        if self.over_budget() and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        data = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        if data:
            self.workers.append(WorkerCost(**data["worker"]))
            self.tests.extend(TestCost(**t) for t in data["tests"])

    def total_cpu(self) -> float:
        return sum(w.cpu for w in self.workers)

    def reference_cpu(self) -> float:
        """The total in the reference machine's seconds (as it is, when the budget has no
        calibration)."""
        budget = self.budget
        if budget is None or budget.calibration is None or not self.calibration:
            return self.total_cpu()
        return self.total_cpu() * budget.calibration / self.calibration

    def over_budget(self) -> bool:
        return self.budget is not None and self.reference_cpu() > self.budget.seconds

    def _write_tests(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        terminalreporter.section("cost of each test (wall and CPU, children included)")
        write("own: of the CPU, what the worker's process computed itself (no child process)")
        heading = f"{'wall s':>8} {'cpu s':>8} {'own s':>7} {'set-up':>7}  {'worker':<6} test"

        def row(t: TestCost) -> str:
            return (
                f"{t.wall:8.2f} {t.cpu:8.2f} {t.own:7.2f} {t.setup_cpu:7.2f}  "
                f"{t.worker:<6} {t.nodeid}"
            )

        write(f"the {TOP} longest:")
        write(heading)
        for t in sorted(self.tests, key=lambda t: t.wall, reverse=True)[:TOP]:
            write(row(t))
        write(f"the {TOP} costliest in CPU:")
        write(heading)
        for t in sorted(self.tests, key=lambda t: t.cpu, reverse=True)[:TOP]:
            write(row(t))
        files: dict[str, list[TestCost]] = {}
        for t in self.tests:
            files.setdefault(t.file, []).append(t)
        file_heading = f"{'wall s':>8} {'cpu s':>8} {'own s':>7} {'set-up':>7} {'tests':>6}  file"

        def file_row(name: str, tests: list[TestCost]) -> str:
            wall, cpu = sum(t.wall for t in tests), sum(t.cpu for t in tests)
            own, setup = sum(t.own for t in tests), sum(t.setup_cpu for t in tests)
            return f"{wall:8.1f} {cpu:8.1f} {own:7.1f} {setup:7.1f} {len(tests):>6}  {name}"

        write(f"the {TOP} costliest files in CPU (set-up: what their fixtures cost):")
        write(file_heading)
        ranked = sorted(files.items(), key=lambda kv: sum(t.cpu for t in kv[1]), reverse=True)
        for name, tests in ranked[:TOP]:
            write(file_row(name, tests))
        # What the workers computed themselves: fakes, in-process bridges, random walks (a
        # cProfile of the file's tests says where; docs/testing.md).
        write(f"the {TOP} costliest files in the workers' own CPU:")
        write(file_heading)
        ranked = sorted(files.items(), key=lambda kv: sum(t.own for t in kv[1]), reverse=True)
        for name, tests in ranked[:TOP]:
            write(file_row(name, tests))
        tests = [t for t in self.tests if t.nodeid != SERVERS_TEARDOWN]
        cpu, setup = sum(t.cpu for t in tests), sum(t.setup_cpu for t in tests)
        own = sum(t.own for t in tests)
        write(
            f"{len(tests)} tests: {cpu:.1f} s CPU, of which set-up {setup:.1f} s, "
            f"in the workers' own processes {own:.1f} s"
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or not self.workers:
            return
        write = terminalreporter.write_line
        if self.config.getoption("--profile"):
            self._write_tests(terminalreporter)
        terminalreporter.section("CPU per worker")
        # own: the worker's process alone; collect: of that, before its first test.
        heading = ("worker", "tests", "cpu s", "own s", "collect", "wall s", "in tests", "cpu/wall")
        write("{:<8} {:>6} {:>8} {:>7} {:>7} {:>8} {:>9} {:>9}".format(*heading))
        for w in sorted(self.workers, key=lambda w: w.name):
            busy = w.in_tests / w.wall if w.wall else 0.0
            load = w.cpu / w.wall if w.wall else 0.0
            write(
                f"{w.name:<8} {w.tests:>6} {w.cpu:8.1f} {w.own:7.1f} {w.collection:7.1f} "
                f"{w.wall:8.1f} {busy:9.0%} {load:9.0%}"
            )
        own = sum(w.own for w in self.workers)
        collection = sum(w.collection for w in self.workers)
        line = (
            f"workers' CPU total: {self.total_cpu():.1f} s (in their own processes {own:.1f} s, "
            f"{collection:.1f} s of it before their first test)"
        )
        if self.controller_cpu:
            line += f" (the controller: {self.controller_cpu:.1f} s more)"
        if self.calibration:
            line += f"; this machine's calibration: {self.calibration:.3f} s"
        write(line)
        wall = time.monotonic() - self.start_wall
        if self.is_controller and wall > 0:
            # How many cores the workers kept busy on average: well under the machine's, the
            # run waits more than it computes (more workers would help); near it, it computes.
            write(
                f"cores busy on average: {self.total_cpu() / wall:.2f} of {os.cpu_count()} "
                f"({wall:.0f} s from the start of the run)"
            )
        budget = self.budget
        if budget is None:
            return
        reference = self.reference_cpu()
        scaled = ""
        if budget.calibration is not None:
            scaled = (
                f"{reference:.1f} s on the reference machine (calibration {budget.calibration} s), "
            )
        if self.over_budget():
            write(
                f"CPU budget EXCEEDED: {scaled}budget {budget.seconds:g} s: find what grew with "
                "`make test-profile` (docs/testing.md)",
                red=True,
                bold=True,
            )
        else:
            used = reference / budget.seconds
            write(f"CPU budget: {scaled}{used:.0%} of {budget.seconds:g} s", green=True)
