"""Mutation testing of the modules that carry the bridge's promises, one slice at a time.

    make mutate SLICE=lines [MUTATE_BUDGET=900] [MUTATE_CHILDREN=1]
    make mutate SLICE=list        # the slices, their modules and their tests
    MUTATE_FRESH=1 make mutate SLICE=lines    # forget earlier results of the slice
    MUTATE_NAMES="name ..." make mutate SLICE=lines  # run these mutants again

Each slice is run by mutmut in a scratch copy (``.mutate/<slice>/``), so the work tree is never
touched and an interrupted run resumes where it stopped while the code and tests are unchanged
(mutmut keeps each mutant's result).
The run stops after MUTATE_BUDGET seconds (a 2-core machine shared with others: run it with
``nice``, one slice at a time); what was measured so far is reported. See docs/testing.md.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# slice: (modules mutated, tests that guard them). Tests marked slow (the randomised SIGKILL
# run) are left out: a mutant must be killed by a deterministic test.
SLICES: dict[str, tuple[list[str], list[str]]] = {
    "lines": (
        ["bridge/agy/lines.py"],
        [
            "tests/agy/test_lines.py",
            "tests/agy/test_lines_boundaries.py",
            "tests/agy/test_process.py",
        ],
    ),
    "process": (
        ["bridge/agy/process.py"],
        [
            "tests/agy/test_process.py",
            "tests/agy/test_process_edges.py",
            "tests/agy/test_process_groups.py",
            "tests/agy/test_process_signals.py",
            "tests/faults/test_agy_faults.py",
            "tests/security/test_stdout_fuzz.py",
        ],
    ),
    "listener": (
        ["bridge/agy/listener/*"],
        [
            "tests/agy/test_listener.py",
            "tests/agy/test_listener_hook_command.py",
            "tests/agy/test_listener_mcp.py",
            "tests/agy/test_listener_edges.py",
            "tests/agy/test_listener_asgi.py",
            "tests/agy/test_listener_registration.py",
            "tests/security/test_listener_live.py",
        ],
    ),
    "secrets": (
        ["bridge/core/scrub.py", "bridge/logs.py", "bridge/agy/launch.py"],
        [
            # tests/security without test_sandbox_escape.py: its agy runs inside bubblewrap,
            # which cannot start the simulator from mutmut's scratch copy (it times out there).
            "tests/security/test_agent_env.py",
            "tests/security/test_listener_live.py",
            "tests/security/test_log_secrets.py",
            "tests/security/test_paths.py",
            "tests/security/test_secret_config.py",
            "tests/security/test_stdout_fuzz.py",
            "tests/agy/test_launch.py",
            "tests/test_config.py",
            "tests/test_logs.py",
            "tests/agy/test_launch_secrets.py",
            "tests/agy/test_launch_timeout.py",
            "tests/agy/test_launch_argv.py",
            "tests/core/test_scrub.py",
            "tests/core/test_scrub_stream.py",
        ],
    ),
    "slack": (
        [
            "bridge/chat/slack/events.py",
            "bridge/chat/slack/access.py",
            "bridge/chat/slack/adapter.py",
            # What the adapter's event handling was before the split (issue 42).
            "bridge/chat/slack/intake.py",
        ],
        ["tests/chat/slack"],
    ),
    "matrix": (
        # Matrix's access rule is the common one (slice "access"), applied in sync.py.
        ["bridge/chat/matrix/sync.py"],
        ["tests/chat/matrix"],
    ),
    "access": (
        # The rule every platform applies (Slack's own access.py is in the slack slice).
        ["bridge/chat/common/access.py"],
        [
            "tests/chat/common/test_access.py",
            "tests/chat/slack/test_access.py",
            "tests/chat/slack/test_access_ledger.py",
            "tests/chat/slack/test_stop_access.py",
            "tests/chat/matrix/test_sync_worker.py",
        ],
    ),
    # The store's interface and models, and its SQLite backend; the PostgreSQL backend is its own
    # slice (its tests start a real PostgreSQL, see tests/pg.py and `make postgres`).
    "store": (
        [
            "bridge/core/store/__init__.py",
            "bridge/core/store/opening.py",
            "bridge/core/store/sqlite.py",
        ],
        ["tests/core", "tests/faults"],
    ),
    "store_pg": (["bridge/core/store/postgres.py"], ["tests/core", "tests/faults"]),
    # The turn loop and hook handling: the worker, the turn, the core and its wake-ups and marks.
    "turn": (
        [
            "bridge/core/thread.py",
            "bridge/core/turn.py",
            "bridge/core/core.py",
            "bridge/core/marks.py",
        ],
        ["tests/core", "tests/faults"],
    ),
}

# Tests that cannot run in the scratch copy: agy in the bwrap sandbox sees only the package
# folder the test process imports (the copy's), but a subprocess imports the work tree's.
CANNOT_RUN_IN_COPY = [
    "tests/core/approvals/test_gate.py::test_the_hook_decides_from_inside_the_sandbox"
]

KILLED = ("killed", "caught by type check", "timeout")
STATUS = re.compile(r"^\s*(\S+): (.+)$")


def _copy_tree(dest: Path) -> None:
    """The work tree as it is now (committed or not), without virtualenvs and caches."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")
    for name in ("bridge", "tests"):
        target = dest / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(ROOT / name, target, ignore=ignore)
    for name in ("pyproject.toml", "config.example.toml"):
        shutil.copy2(ROOT / name, dest / name)


def _config(modules: list[str], tests: list[str]) -> str:
    existing = [t for t in tests if (ROOT / t).exists()]
    lines = [
        "[mutmut]",
        "source_paths=bridge/",
        "also_copy=config.example.toml",
        "only_mutate=",
        *(f"    {m}" for m in modules),
        "pytest_add_cli_args_test_selection=",
        *(f"    {t}" for t in existing),
        "pytest_add_cli_args=",
        "    -p",
        "    no:cacheprovider",
        "    -q",
        "    -m",
        "    not slow",
        *(
            f"    --deselect={t}"
            for t in CANNOT_RUN_IN_COPY
            if any(t.startswith(e) for e in existing)
        ),
    ]
    return "\n".join(lines) + "\n"


def _mutmut(dest: Path, *args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "mutmut"), *args]


def _statuses(dest: Path) -> list[tuple[str, str]]:
    out = subprocess.run(
        _mutmut(dest, "results", "--all", "true"),
        cwd=dest,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [m.groups() for line in out.splitlines() if (m := STATUS.match(line))]  # type: ignore[misc]


def _results(dest: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    survivors = []
    for name, status in _statuses(dest):
        counts[status] += 1
        if status not in KILLED:
            survivors.append(f"{status:>10}  {name}")
    report = dest / "report.txt"
    report.write_text("\n".join(survivors) + "\n")
    return counts


def _run_mutmut(
    dest: Path, env: dict[str, str], names: list[str], children: int, budget: float
) -> bool:
    """One mutmut run; False when the budget ran out first."""
    with (dest / "mutmut.log").open("ab") as log:
        proc = subprocess.Popen(
            _mutmut(dest, "run", "--max-children", str(children), *names),
            cwd=dest,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=max(1.0, budget))
        return True
    except subprocess.TimeoutExpired:
        # mutmut records each mutant's result as it goes.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return False


def run(slice_name: str, budget: float, children: int) -> int:
    modules, tests = SLICES[slice_name]
    dest = ROOT / ".mutate" / slice_name
    if os.environ.get("MUTATE_FRESH") and (dest / "mutants").exists():
        shutil.rmtree(dest / "mutants")
    dest.mkdir(parents=True, exist_ok=True)
    names = [n for n in os.environ.get("MUTATE_NAMES", "").split() if n]
    _copy_tree(dest)
    (dest / "setup.cfg").write_text(_config(modules, tests))
    # Tests that start the bridge as a subprocess (the console CLI) import the work tree's
    # unmutated code: mutmut's switches work inside its own test process only.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    print(f"mutate {slice_name}: {', '.join(modules)} against {', '.join(tests)}", flush=True)
    print(f"  in {dest}, for at most {budget:g} s", flush=True)
    deadline = time.monotonic() + budget
    finished = False
    for _attempt in range(2):
        finished = _run_mutmut(dest, env, names, children, deadline - time.monotonic())
        if _statuses(dest) and any(s != "not checked" for _, s in _statuses(dest)):
            break
        # mutmut gives up when the clean run of the tests fails; on a loaded machine a slow
        # test can, once: try once more before reporting that nothing was measured.
    counts = _results(dest)
    done = sum(n for status, n in counts.items() if status != "not checked")
    killed = sum(counts[status] for status in KILLED)
    score = 100.0 * killed / done if done else 0.0
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    print(f"  {summary}")
    print(
        f"  score {score:.1f}% ({killed} of {done} checked mutants killed or timed out)"
        + ("" if finished else "; budget used up, run again to go on")
    )
    print(f"  survivors: {dest / 'report.txt'}; see one with: cd {dest} && mutmut show NAME")
    if not done:
        print(f"  nothing was measured: see {dest / 'mutmut.log'}")
    return 0


def main(argv: list[str]) -> int:
    name = argv[1] if len(argv) > 1 else "list"
    if name == "list" or name not in SLICES:
        if name != "list":
            print(f"unknown slice {name!r}")
        for key, (modules, tests) in SLICES.items():
            print(f"{key:10} {' '.join(modules)}\n{'':10} tests: {' '.join(tests)}")
        return 0 if name == "list" else 2
    budget = float(os.environ.get("MUTATE_BUDGET", "900"))
    children = int(os.environ.get("MUTATE_CHILDREN", "1"))
    return run(name, budget, children)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
