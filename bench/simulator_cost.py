"""The CPU one simulator process costs, per kind, beside a bare interpreter.

    python -m bench.simulator_cost [--runs 20] [--quick]

The suite starts the agy simulator (``python -m bridge.simulator``) hundreds of times in a
run: the bridge's capability probe (``--help``, ``--version``) before every agy start, and one
process per turn or per kept conversation. This bench starts each kind ``--runs`` times in
turn, one after the other, and reads each process's CPU (user + system, its children
included) from ``getrusage(RUSAGE_CHILDREN)``: CPU, not wall time, so a busy machine barely
moves it. Beside it, in the same rounds, ``python -c pass``: the floor any Python process pays.

The kinds:

- ``--version`` and ``--help``: the probe, which prints and exits.
- ``turn``: the bridge's argv (``--print=`` first, stream-json both ways, ``--add-dir`` of a
  session folder), one user line on stdin, then EOF: start, ``init``, one turn, ``result``.
- ``turn + hook``: the same with a plugin whose ``PreInvocation`` hook is a shell command
  (``cat``, then ``{}``), as the bridge installs one (its hook runs curl): the hook's ``sh``
  counts too.
- ``turn + run_command``: a turn whose model calls ``run_command`` (a real ``bash``) once.

``--against DIR`` runs the simulator of another checkout (``git worktree add DIR REV``, or
``git archive REV | tar -x -C DIR``) in the same rounds, for a before and after side by side.

Only the standard library is used here, so the bench itself adds nothing to what it reads.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SIMULATOR = (sys.executable, "-m", "bridge.simulator")
ROOT = Path(__file__).resolve().parents[1]
TURN_FLAGS = ("--print=", "--input-format", "stream-json", "--output-format", "stream-json")


@dataclass
class Kind:
    name: str
    argv: list[str]
    stdin: bytes = b""
    pythonpath: str = str(ROOT)
    samples: list[float] = field(default_factory=list)

    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1000


def user_line(text: str) -> bytes:
    message = {"event": "user", "message": {"role": "user", "content": text}}
    return (json.dumps(message) + "\n").encode()


def _plugin(workspace: Path) -> None:
    """A plugin in ``workspace`` whose PreInvocation hook reads its input and answers ``{}``."""
    plugin = workspace / ".agents" / "plugins" / "bench"
    plugin.mkdir(parents=True)
    (plugin / "plugin.json").write_text(json.dumps({"name": "bench"}), encoding="utf-8")
    handler = {"type": "command", "command": "cat >/dev/null; printf '{}'", "timeout": 10}
    hooks = {"bench": {"PreInvocation": [handler]}}
    (plugin / "hooks.json").write_text(json.dumps(hooks), encoding="utf-8")


def kinds(work: Path, pythonpath: str) -> list[Kind]:
    """The simulator's process kinds, run from the checkout at ``pythonpath``."""
    bare = work / "bare"
    hooked = work / "hooked"
    bare.mkdir(exist_ok=True)
    if not hooked.exists():
        hooked.mkdir()
        _plugin(hooked)
    turn = [*SIMULATOR, *TURN_FLAGS]
    found = [
        Kind("--version", [*SIMULATOR, "--version"]),
        Kind("--help", [*SIMULATOR, "--help"]),
        Kind("turn", [*turn, "--add-dir", str(bare)], user_line("hello")),
        Kind("turn + hook", [*turn, "--add-dir", str(hooked)], user_line("hello")),
        Kind(
            "turn + run_command",
            [*turn, "--add-dir", str(bare)],
            user_line("[[tool run_command true]] go"),
        ),
    ]
    for kind in found:
        kind.pythonpath = pythonpath
    return found


def cpu_of(kind: Kind, cwd: Path, env: dict[str, str]) -> float:
    """User + system CPU of one run of ``kind``, its reaped children included."""
    env = {**env, "PYTHONPATH": kind.pythonpath}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        kind.argv, input=kind.stdin, cwd=cwd, env=env, capture_output=True, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(
            f"{kind.name}: exit {done.returncode}: {done.stderr.decode(errors='replace')}"
        )
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGY_SIM_")}
    env["AGY_SIM_HOME"] = str(home)
    # As `make test` runs them (bench/startup.py does the same): bytecode written and read. A
    # shell with PYTHONDONTWRITEBYTECODE set had every process compile the turn's modules from
    # source: about 10 ms more a turn, charged to the simulator.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(runs: int, against: Path | None) -> tuple[Kind, list[Kind], list[Kind]]:
    """(the bare interpreter, this checkout's kinds, the other checkout's kinds or [])."""
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        work = Path(tmp)
        home = work / "home"
        home.mkdir()
        (home / "sim-login.json").write_text(json.dumps({"account": "bench@agy-sim.invalid"}))
        env = _env(home)
        bare = Kind("python -c pass", [sys.executable, "-c", "pass"])
        ours = kinds(work, str(ROOT))
        theirs = kinds(work, str(against.resolve())) if against is not None else []
        every = [bare, *ours, *theirs]
        for kind in every if runs > 1 else ():  # a warm-up each: page cache, .pyc files
            cpu_of(kind, work, env)
        for _ in range(runs):  # rounds: every kind sees the same machine load
            for kind in every:
                kind.samples.append(cpu_of(kind, work, env))
        return bare, ours, theirs


def report(bare: Kind, ours: list[Kind], theirs: list[Kind]) -> str:
    base = bare.median_ms()
    header = ["kind", "CPU ms (median)", "min-max", "vs python -c pass"]
    if theirs:
        header += ["--against CPU ms", "vs python -c pass"]
    rows = [[bare.name, f"{base:.1f}", _spread(bare), "1.00x"] + (["", ""] if theirs else [])]
    for n, kind in enumerate(ours):
        row = [kind.name, f"{kind.median_ms():.1f}", _spread(kind), _ratio(kind, base)]
        if theirs:
            row += [f"{theirs[n].median_ms():.1f}", _ratio(theirs[n], base)]
        rows.append(row)
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in (header, *rows)
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _spread(kind: Kind) -> str:
    return f"{min(kind.samples) * 1000:.1f}-{max(kind.samples) * 1000:.1f}"


def _ratio(kind: Kind, base_ms: float) -> str:
    return f"{kind.median_ms() / base_ms:.2f}x" if base_ms > 0 else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.simulator_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=20,
        help="runs of each kind (default 20; 1: a smoke run, no warm-up)",
    )
    parser.add_argument("--quick", action="store_true", help="3 runs of each kind")
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout (its root folder) whose simulator runs in the same rounds",
    )
    args = parser.parse_args(argv)
    runs = 3 if args.quick else args.runs
    print(f"simulator processes, CPU (user+sys) per process, {runs} rounds", flush=True)
    print(report(*measure(runs, args.against)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
