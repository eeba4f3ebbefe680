"""What one `python -m bridge` costs to start, against a bare interpreter started the same way.

    python -m bench.startup [--runs 5] [--quick]

Every bridge process the tests start (and every operator's restart) pays its start-up in CPU
before it does anything: the imports, the config's models, the agy probe (``--help`` and
``--version``: two processes of the simulator here), the store's opening. Each row starts a
process the way the tests do and reads its CPU (user + system, with the children it waited
for: the probe) from ``os.wait4``:

- ``python -c pass``: the baseline, the interpreter alone;
- ``import bridge.cli``: what every command imports before it reads its config;
- ``console``: `python -m bridge console` on the simulator, its stdin closed at once (the
  start, the banner, an orderly end);
- ``doctor``: `python -m bridge doctor` with the same config (agy probed, the store, the
  listener, the environment checked);
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


def cpu_of(
    argv: Sequence[str], cwd: Path, env: dict[str, str], until: Callable[[], bool] | None
) -> float:
    """The CPU seconds (user + system, children included) of one process: started with its
    stdin closed, sent SIGTERM once ``until()`` holds (None: left to end on its own), reaped
    with ``os.wait4``."""
    errors = cwd / "stderr.log"
    with errors.open("wb") as err:
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
        )
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


async def measure(runs: int) -> list[tuple[str, list[float]]]:
    found: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        env = {
            **os.environ,
            "AGY_SIM_HOME": str(signed_in(root / "sim-home")),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_APP_TOKEN": APP_TOKEN,
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        plain = root / "console.toml"
        plain.write_text(config_text(None, 0, forge=False))
        python = sys.executable
        bridge = [python, "-m", "bridge"]
        rows: list[tuple[str, list[str], Callable[[], bool] | None]] = [
            ("python -c pass (baseline)", [python, "-c", "pass"], None),
            ("import bridge.cli", [python, "-c", "import bridge.cli"], None),
            ("console", [*bridge, "console", "--config", str(plain)], None),
            ("doctor", [*bridge, "doctor", "--config", str(plain)], None),
        ]
        async with serve_fake_slack() as fake:
            for forge in (False, True):
                port = free_port()
                path = root / f"slack-{forge}.toml"
                path.write_text(config_text(fake.api_url, port, forge))
                name = "run (slack, webhooks)" if forge else "run (slack)"
                rows.append((name, [*bridge, "run", "--config", str(path)], healthy(port)))
            for name, argv, until in rows:
                samples = []
                for _ in range(runs):
                    # The fake Slack serves from this event loop: the start waits in a thread.
                    samples.append(await anyio.to_thread.run_sync(cpu_of, argv, root, env, until))
                found.append((name, samples))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="starts of each (default 5)")
    parser.add_argument("--quick", action="store_true", help="two starts of each")
    args = parser.parse_args(argv)
    runs = 2 if args.quick else args.runs
    print(f"machine: {machine()}")
    results = anyio.run(measure, runs)
    base = statistics.median(results[0][1])
    rows = [
        [
            name,
            f"{statistics.median(s):.3f}",
            f"{min(s):.3f}-{max(s):.3f}",
            ratio(statistics.median(s), base),
        ]
        for name, s in results
    ]
    print(f"CPU seconds per start (user + system, children included), median of {runs}:")
    print(table(["process", "CPU s", "range", "vs baseline"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
