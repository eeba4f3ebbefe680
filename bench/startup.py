"""What one `python -m bridge` costs to start, against a bare interpreter started the same way.

    python -m bench.startup [--runs 5] [--quick]

Every bridge process the tests start (and every operator's restart) pays its start-up in CPU
before it does anything: the imports, the config's models, the agy probe (``--help`` and
``--version``: two processes of the simulator here), the store's opening; and its end after it
(bridge/ending.py). Each row starts a process the way the tests do and reads its CPU from its
first line to its exit (user + system, with the children it waited for: the probe) from
``os.wait4``:

- ``python -c pass``: the baseline, the interpreter alone;
- ``import bridge.cli``: what every command imports before it reads its config;
- ``console``: `python -m bridge console` on the simulator, its stdin closed at once (the
  start, the banner, an orderly end);
- ``doctor``: `python -m bridge doctor` with the same config (agy probed, the store, the
  listener, the environment checked; Slack configured by the tokens in the environment);
- ``doctor (matrix)``: the same with a ``[matrix]`` section, encryption off (no homeserver is
  asked): what the doctor imports to read what the Matrix adapter left;
- ``run (slack)``: `python -m bridge run` against the project's fake Slack (Socket Mode) with
  the admin endpoint, until ``/healthz`` names the Slack adapter, then SIGTERM;
- ``run (slack, webhooks)``: the same with a ``[forge]`` and its webhook secret.

Numbers: the median of ``--runs`` starts, and the ratio to the baseline. On a machine shared
with other jobs the wall times swing; the CPU barely moves.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio

from bench.common import machine, ratio, table
from tests.chat.slack.fake_slack import APP_TOKEN, BOT_TOKEN, serve_fake_slack
from tests.doubles import signed_in
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
SIMULATOR = [sys.executable, "-m", "bridge.simulator"]
# A Matrix bridge for the doctor: a closed port, encryption off, so no check asks it anything.
MATRIX = (
    '[matrix]\nhomeserver = "http://127.0.0.1:9"\nuser_id = "@bot:example.org"\n'
    'password = "bench"\nencryption = false\n'
)


def cpu_of(
    argv: Sequence[str], cwd: Path, env: dict[str, str], until: Callable[[], bool] | None
) -> float:
    """The CPU seconds (user + system, children included) of one process: started with its
    stdin a pipe closed at once, sent SIGTERM once ``until()`` holds (None: left to end on its
    own), reaped with ``os.wait4``."""
    errors = cwd / "stderr.log"
    with errors.open("wb") as err:
        # A pipe, closed at once: the console's user is done (as the tests drive it).
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err
        )
    assert process.stdin is not None
    process.stdin.close()
    deadline = time.monotonic() + 120
    while until is not None and not until():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            tail = errors.read_text(errors="replace")[-3000:]
            raise SystemExit(f"{' '.join(argv[1:4])} never served (exit {process.poll()}):\n{tail}")
        time.sleep(0.02)
    if until is not None:
        process.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = errors.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{' '.join(argv[1:4])} exited {process.returncode}:\n{tail}")
    return usage.ru_utime + usage.ru_stime


def healthy(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                return bool(json.loads(r.read()).get("adapters") == ["slack"])
        except (OSError, urllib.error.URLError, ValueError):
            return False

    return check


def config_text(slack_url: str | None, port: int, forge: bool) -> str:
    text = (
        '[bridge]\ndata_dir = "data"\n[approvals]\nmode = "off"\n'
        f'[agy]\ncommand = {json.dumps(SIMULATOR)}\nisolation = "none"\n'
        'pass_env = ["AGY_SIM_HOME"]\n'
    )
    if slack_url is not None:
        text += f'[slack]\napi_url = "{slack_url}"\n[admin]\nenabled = true\nport = {port}\n'
    if forge:
        text += '[forge]\nkind = "github"\nrepo = "team/repo"\nwebhook_secret = "bench"\n'
    return text


async def measure(runs: int, other: Path | None) -> list[tuple[str, list[float], list[float]]]:
    """Per row, ``runs`` CPU readings of this tree's bridge and, interleaved with them (so both
    see the same machine), of ``other``'s (its ``bridge/`` first on ``PYTHONPATH``)."""
    found: list[tuple[str, list[float], list[float]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        env = {
            **os.environ,
            "AGY_SIM_HOME": str(signed_in(root / "sim-home")),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_APP_TOKEN": APP_TOKEN,
        }
        # As `make test` runs them: bytecode written and read.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        # This tree's bridge, wherever the bench is started from (the processes run in ``root``).
        envs = [{**env, "PYTHONPATH": str(ROOT)}]
        if other is not None:
            envs.append({**env, "PYTHONPATH": str(other)})
        plain = root / "console.toml"
        plain.write_text(config_text(None, 0, forge=False))
        matrix = root / "matrix.toml"
        matrix.write_text(config_text(None, 0, forge=False) + MATRIX)
        python = sys.executable
        bridge = [python, "-m", "bridge"]
        rows: list[tuple[str, list[str], Callable[[], bool] | None]] = [
            ("python -c pass (baseline)", [python, "-c", "pass"], None),
            ("import bridge.cli", [python, "-c", "import bridge.cli"], None),
            ("console", [*bridge, "console", "--config", str(plain)], None),
            ("doctor", [*bridge, "doctor", "--config", str(plain)], None),
            ("doctor (matrix)", [*bridge, "doctor", "--config", str(matrix)], None),
        ]
        async with serve_fake_slack() as fake:
            for forge in (False, True):
                port = free_port()
                path = root / f"slack-{forge}.toml"
                path.write_text(config_text(fake.api_url, port, forge))
                name = "run (slack, webhooks)" if forge else "run (slack)"
                rows.append((name, [*bridge, "run", "--config", str(path)], healthy(port)))
            for name, argv, until in rows:
                samples: list[list[float]] = [[], []]
                for _ in range(runs):
                    for index, run_env in enumerate(envs):
                        # The fake Slack serves from this event loop: the start waits in a thread.
                        cpu = await anyio.to_thread.run_sync(cpu_of, argv, root, run_env, until)
                        samples[index].append(cpu)
                found.append((name, *samples))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="starts of each (default 5)")
    parser.add_argument("--quick", action="store_true", help="two starts of each")
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="DIR",
        help="another checkout (e.g. `git worktree add /tmp/before main`): its bridge measured "
        "side by side with this one's",
    )
    args = parser.parse_args(argv)
    runs = 2 if args.quick else args.runs
    print(f"machine: {machine()}")
    results = anyio.run(measure, runs, args.compare)
    base = statistics.median(results[0][1])
    headers = ["process", "CPU s", "range", "vs baseline"]
    if args.compare is not None:
        headers += [f"{args.compare.name}: CPU s", "range", "vs baseline"]
    rows = []
    for name, *columns in results:
        row = [name]
        for samples in columns:
            if samples:
                median = statistics.median(samples)
                low, high = min(samples), max(samples)
                row += [f"{median:.3f}", f"{low:.3f}-{high:.3f}", ratio(median, base)]
        rows.append(row)
    print(f"CPU seconds per start (user + system, children included), median of {runs}:")
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
