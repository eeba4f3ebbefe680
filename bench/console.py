"""The web console's pages against a static file of the same size, from the same server.

    python -m bench.console [--threads 200] [--requests 200] [--quick]

A bridge on the agy simulator with the console on: the store holds ``--threads`` threads (each
with a finished turn and its usage), and one more thread has a turn running (its answer on the
way, a tool call done, held before its last model call). The console is served by uvicorn on
loopback by the console's own server (``bridge.web.serving.open_console``: its socket, its
uvicorn settings), with a directory of static files mounted beside the console's application.
A client in a process of its own (http.client on one kept-alive connection,
as a browser reuses its connection) asks, alternately, for a console page and for a static
file of exactly that page's size, and times each answer: the ratio is what rendering the page
costs over sending the same bytes.

Pages measured, each for an admin (sees every thread; no membership question) and for a member
(every thread's channel checked, the answers cached as the console caches them):
- ``/``: the threads page: its first page (the 50 most recently active of the threads; the
  order and who sees what settled over all of them).
- ``/thread?t=…``: the live page of the streaming thread (its state, the turn so far, its
  tool calls, messages and turns).

Goal: each page within 3x of the static file at p50.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from bench.common import machine, ms, percentile, ratio, table
from bridge.app import open_bridge
from bridge.config import build_config
from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.signin import WebSessions
from bridge.core.store import Store
from bridge.core.store.rows import TurnState, Usage
from bridge.web import serving
from bridge.web.core import ConsoleCore
from bridge.web.guard import COOKIE
from tests.doubles import RecordingAdapter, signed_in

SIMULATOR = [sys.executable, "-m", "bridge.simulator"]
PLATFORM = "bench"
ADMIN = Author(id="@root:bench", display_name="Root")
MEMBER = Author(id="@alice:bench", display_name="Alice")
LIVE = ThreadRef(platform=PLATFORM, channel="live", thread="t-live")
GOAL = 3.0


class MembersAdapter(RecordingAdapter):
    """The recording adapter that says everyone is in every channel (as a chat would, after a
    round trip the console caches)."""

    def __init__(self) -> None:
        super().__init__(platform=PLATFORM, record_text=False)
        self.member_calls = 0

    async def is_member(self, channel: str, user_id: str) -> bool:
        self.member_calls += 1
        return True

    async def is_direct(self, channel: str) -> bool:
        return channel.startswith("dm-")


async def add_threads(store: Store, count: int) -> None:
    """``count`` threads in 20 channels, each with a message, its finished turn and usage."""
    for n in range(count):
        thread = ThreadRef(platform=PLATFORM, channel=f"C{n % 20:02d}", thread=f"{n}.000")
        author = Author(id=f"@user{n % 7}:bench", display_name=f"User {n % 7}")
        message = IncomingMessage(
            thread=thread,
            event_id=f"e{n}",
            message_id=f"m{n}",
            author=author,
            text=f"please look at issue {n} and tell me what the failing test says",
        )
        await store.add_message(message, record_thread=True)
        taken = await store.take_turn(thread.key, f"conv-{n}")
        assert taken is not None
        usage = Usage(input_tokens=1200 + n, output_tokens=300, total_tokens=1500 + n)
        await store.finish_turn(taken[0], TurnState.DONE, response="done", usage=usage)
        # Its share of the period's usage, as the team controls record it.
        await store.database.execute(
            "INSERT INTO usage_shares (turn_id, person, person_name, thread_key, platform,"
            " channel, model, at, input_tokens, output_tokens, thinking_tokens,"
            " cache_read_tokens, total_tokens, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " ?, ?, ?)",
            (
                taken[0],
                author.id,
                author.display_name,
                thread.key,
                PLATFORM,
                thread.channel,
                "gemini-3-pro",
                time.time(),
                usage.input_tokens,
                usage.output_tokens,
                0,
                0,
                usage.total_tokens,
                0.01 * (n % 9),
            ),
        )


async def start_streaming(bridge: object, core: object, go: Path) -> None:
    """A turn that has streamed its narration and run one tool, then waits for ``go``."""
    submit = core.submit  # type: ignore[attr-defined]
    live = core.live  # type: ignore[attr-defined]
    text = (
        "[[narrate Reading the failing test first, then the module it imports.]] "
        f"[[calls 2]] [[wait {go}]] [[long 60]] why does the build fail?"
    )
    await submit(
        IncomingMessage(
            thread=LIVE, event_id="live-1", message_id="live-1", author=MEMBER, text=text
        )
    )
    with anyio.fail_after(60):
        while True:
            turn = live.current(LIVE.key)
            if turn is not None and turn.tools:
                return
            await anyio.sleep(0.02)


CLIENT = r"""
import http.client, json, sys, time
host, port, cookie = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pairs, count = json.loads(sys.argv[4]), int(sys.argv[5])
conn = http.client.HTTPConnection(host, port)
def get(path, with_cookie):
    headers = {"Cookie": cookie} if with_cookie else {}
    start = time.perf_counter()
    conn.request("GET", path, headers=headers)
    answer = conn.getresponse()
    body = answer.read()
    took = time.perf_counter() - start
    if answer.status != 200:
        raise SystemExit(f"{path}: HTTP {answer.status}: {body[:300]!r}")
    return took, len(body)
for page, static in pairs:  # warm both paths (templates compiled, files opened once)
    for _ in range(3):
        get(page, True); get(static, False)
out = {}
for page, static in pairs:
    times = {"page": [], "static": []}
    for n in range(count):
        order = [("page", page, True), ("static", static, False)]
        if n % 2:
            order.reverse()  # neither always goes first
        for name, path, auth in order:
            took, size = get(path, auth)
            times[name].append(took)
            times[name + "_bytes"] = size
    out[page] = times
print(json.dumps(out))
"""


def run_client(
    base: str, cookie: str, pairs: Sequence[tuple[str, str]], count: int
) -> dict[str, dict[str, object]]:
    host, port = base.removeprefix("http://").split(":")
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, host, port, cookie, json.dumps(pairs), str(count)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)
    result: dict[str, dict[str, object]] = json.loads(done.stdout)
    return result


def same_size_file(where: Path, name: str, size: int) -> str:
    """A static HTML file of ``size`` bytes (the page it stands beside)."""
    line = "<p>the same number of bytes as the page, sent as they are stored</p>\n"
    body = (line * (size // len(line) + 1)).encode()[:size]
    (where / name).write_bytes(body)
    return f"/same-size/{name}"


async def fetch(base: str, path: str, cookie: str) -> str:
    def get() -> str:
        import http.client

        host, port = base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port))
        conn.request("GET", path, headers={"Cookie": cookie})
        answer = conn.getresponse()
        body = answer.read()
        conn.close()
        if answer.status != 200:
            raise RuntimeError(f"{path}: HTTP {answer.status}: {body[:300]!r}")
        return body.decode()

    return await anyio.to_thread.run_sync(get)


async def measure(threads: int, requests: int) -> list[list[str]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-console-"))
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp / "sim-home"))
    static = tmp / "static"
    static.mkdir()
    go = tmp / "go"
    config = build_config(
        {
            "bridge": {"data_dir": str(tmp / "data")},
            "agy": {
                "command": SIMULATOR,
                "init_timeout": 30,
                "isolation": "none",
                "pass_env": ["AGY_SIM_HOME"],
                "state_dirs": [],
            },
            "approvals": {"mode": "off"},
            "web": {
                "enabled": True,
                "port": 0,
                "public_url": "http://127.0.0.1",
                "admins": [ADMIN.id],
            },
        },
        environ={},
    )
    adapter = MembersAdapter()
    rows: list[list[str]] = []
    async with open_bridge(config, {PLATFORM: adapter}) as bridge:
        core = bridge.core
        await add_threads(bridge.store, threads)
        await start_streaming(bridge, core, go)
        sessions = WebSessions(bridge.store.database, 300, 3600)
        console_app = serving.console_app

        def beside_static(core: ConsoleCore) -> Starlette:
            return Starlette(
                routes=[
                    Mount("/same-size", StaticFiles(directory=static)),
                    Mount("/", console_app(core)),
                ]
            )

        # The console's own server (its socket, its uvicorn settings), with the static
        # directory mounted beside its application.
        serving.console_app = beside_static  # type: ignore[assignment]
        try:
            async with serving.open_console(core) as base:
                for who, author in (("admin", ADMIN), ("member", MEMBER)):
                    cookie = f"{COOKIE}={await sessions.open(author, PLATFORM)}"
                    pages = {"threads, page 1": "/", "live thread": f"/thread?t={LIVE.key}"}
                    pairs = []
                    for name, path in pages.items():
                        body = await fetch(base, path, cookie)
                        size = len(body.encode())
                        if path != "/":  # the live page shows the turn running, not a past one
                            assert "echo step 1" in body and 'id="no-turn"' not in body, body
                        pairs.append((path, same_size_file(static, f"{who}-{name[:4]}.html", size)))
                    timed = await anyio.to_thread.run_sync(
                        run_client, base, cookie, pairs, requests
                    )
                    for (name, path), (_, _static) in zip(pages.items(), pairs, strict=True):
                        rows.append(row(f"{name} ({who})", timed[path]))
        finally:
            serving.console_app = console_app  # type: ignore[assignment]
            go.touch()
            with anyio.move_on_after(30):
                while core.live.current(LIVE.key) is not None:
                    await anyio.sleep(0.05)
            await core.shutdown()
    return rows


def row(name: str, timed: dict[str, object]) -> list[str]:
    page = [float(x) for x in timed["page"]]  # type: ignore[attr-defined]
    static = [float(x) for x in timed["static"]]  # type: ignore[attr-defined]
    p50, s50 = percentile(page, 0.5), percentile(static, 0.5)
    return [
        name,
        f"{timed['page_bytes']:,}",
        str(len(page)),
        ms(p50),
        ms(percentile(page, 0.99)),
        ms(s50),
        ms(percentile(static, 0.99)),
        ratio(p50, s50),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__)
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--requests", type=int, default=200, help="timed requests per page")
    parser.add_argument("--quick", action="store_true", help="20 threads, 10 requests")
    args = parser.parse_args(argv)
    threads, requests = (20, 10) if args.quick else (args.threads, args.requests)
    print(machine())
    started = time.perf_counter()
    rows = anyio.run(measure, threads, requests)
    headers = [
        "page",
        "bytes",
        "requests",
        "page p50 ms",
        "page p99 ms",
        "static p50 ms",
        "static p99 ms",
        "page / static p50",
    ]
    print(f"\n{threads} threads in the store, one turn streaming; {requests} requests each\n")
    print(table(headers, rows))
    worst = max(float(r[-1].rstrip("x")) for r in rows)
    verdict = "met" if worst <= GOAL else "not met"
    print(f"\ngoal: every page within {GOAL:g}x of a static file of its size at p50: {verdict}")
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
