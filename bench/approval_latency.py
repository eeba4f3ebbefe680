"""Click to allow: how long after an approver clicks **Approve** in Slack agy gets ``allow``.

The whole bridge runs against the local Slack fake (Socket Mode, Block Kit) and the agy
simulator, in this process. One turn asks for N commands in a row; each waits for approval
(the approvals policy asks for every one of them: they redirect their output). For each
request the driver clicks Approve and notes the wall time; the command, which agy runs as soon
as it reads ``allow``, writes the wall time it started. The difference is the latency (it also
holds the start of that command's shell, so it errs on the slow side).

Beside it, the baseline: the fake's own round trip for the same click (the socket envelope
sent until Bolt's acknowledgement is back), the floor no Slack bot goes below.

    python -m bench.approval_latency [--samples 40] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio

from bench.common import machine, ms, percentile, ratio, table
from bridge.app import open_bridge, start_adapters
from bridge.chat.slack.adapter import SlackAdapter
from bridge.chat.slack.approvals import APPROVE_ACTION_ID
from bridge.config import build_config
from tests.doubles import signed_in

SAMPLES = 40
GOAL_P99_SECONDS = 1.0
CHANNEL = "C0BENCH01"
USER = "UBENCH001"
WAIT = 60.0


async def measure(samples: int) -> tuple[list[float], list[float]]:
    from tests.chat.slack.fake_slack import APP_TOKEN, BOT_TOKEN, BOT_USER, FakeSlack, Message

    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    fake = FakeSlack()
    await fake.start()
    latencies: list[float] = []
    acks: list[float] = []
    try:
        fake.add_user(USER, "alice")
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            # The marks are written in the thread's workspace: the only place a sandboxed
            # agy may write.
            work = root / "work"
            marks = work / "marks"
            marks.mkdir(parents=True)
            os.environ["AGY_SIM_HOME"] = str(signed_in(root / "sim-home"))
            config = build_config(
                {
                    "bridge": {"data_dir": str(root / "data"), "log_level": "WARNING"},
                    "agy": {
                        "command": [sys.executable, "-m", "bridge.simulator"],
                        # The simulator's home is its only state directory, passed by name.
                        "state_dirs": [],
                        "pass_env": ["AGY_SIM_HOME"],
                    },
                    "slack": {
                        "bot_token": BOT_TOKEN,
                        "app_token": APP_TOKEN,
                        "api_url": fake.api_url,
                        "allowed_users": [USER],
                    },
                    "approvals": {"mode": "ask", "timeout": 600},
                    "workspaces": [{"path": str(work)}],
                },
                environ={},
            )
            adapter = SlackAdapter(
                config.slack,
                data_dir=config.bridge.data_dir,
                reply_interval=0.05,
                socket_ping_interval=1.0,
                retry_backoff=0.05,
            )
            script = " ".join(
                f"[[tool run_command date +%s.%N > marks/{k}]]" for k in range(samples)
            )
            ts = fake.next_ts()
            event = {
                "type": "app_mention",
                "channel": CHANNEL,
                "user": USER,
                "text": f"<@{BOT_USER}> {script}",
                "ts": ts,
                "event_ts": ts,
                "team": "T0FAKE01",
            }

            def requests() -> list[Message]:
                return [
                    m
                    for m in fake.thread(CHANNEL, ts)
                    if "Approval needed" in m.visible or "Approved by" in m.visible
                ]

            async with open_bridge(config, {"slack": adapter}) as bridge:
                async with anyio.create_task_group() as tg:
                    await start_adapters(bridge, tg)
                    await fake.push_event(event)
                    for k in range(samples):
                        await fake.wait_for(lambda k=k: len(requests()) > k, WAIT)
                        request = requests()[k]
                        mark = marks / str(k)
                        clicked = time.time()
                        envelope = await fake.click(request, USER, APPROVE_ACTION_ID)
                        await fake.wait_ack(envelope, WAIT)
                        acks.append(time.time() - clicked)
                        with anyio.fail_after(WAIT):
                            while not (mark.exists() and mark.read_text().strip()):
                                await anyio.sleep(0.002)
                        latencies.append(float(mark.read_text()) - clicked)
                    await bridge.core.shutdown()
                    tg.cancel_scope.cancel()
    finally:
        await fake.close()
    return latencies, acks


def report(latencies: Sequence[float], acks: Sequence[float]) -> str:
    rows = [
        [
            "click → agy reads allow",
            str(len(latencies)),
            ms(percentile(latencies, 0.5)),
            ms(percentile(latencies, 0.99)),
            ms(max(latencies)),
            ratio(percentile(latencies, 0.99), percentile(acks, 0.99)),
        ],
        [
            "click → Slack ack (baseline)",
            str(len(acks)),
            ms(percentile(acks, 0.5)),
            ms(percentile(acks, 0.99)),
            ms(max(acks)),
            "1.00x",
        ],
    ]
    p99 = percentile(latencies, 0.99)
    verdict = "met" if p99 < GOAL_P99_SECONDS else "MISSED"
    return (
        table(["path", "clicks", "p50 ms", "p99 ms", "max ms", "p99 ratio"], rows)
        + f"\n\np99 {p99 * 1000:.0f} ms (goal < {GOAL_P99_SECONDS * 1000:.0f} ms: {verdict})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.approval_latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--quick", action="store_true", help="5 clicks")
    args = parser.parse_args(argv)
    samples = 5 if args.quick else args.samples
    print(machine(), flush=True)
    latencies, acks = anyio.run(measure, samples, backend="asyncio")
    print(report(latencies, acks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
