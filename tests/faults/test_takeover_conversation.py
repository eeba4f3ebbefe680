"""A turn cut off by a SIGKILLed bridge: the agent's conversation goes on where its state is in
reach, the cut-off request is never run again by itself, and ``!retry`` runs it once more.

Real `agy-bridge run` processes with the Slack fake (tests/faults/test_instances.py), agy (the
simulator) in real bubblewrap sandboxes, each thread's private agy state where the bridge keeps
it: two instances on one host with one PostgreSQL, and one instance restarting on SQLite. The
cut-off request appends a line to a file in the thread's workspace (shared by both instances)
and then waits: the file counts how often agy acted on the request, over both instances.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.agy.private_state import THREADS_DIR
from bridge.chat.slack.retry import RETRY_ACTION_ID
from tests.agy.sandboxed import require_bwrap
from tests.chat.slack.conftest import ALICE, BOB, CHANNEL, mention_event, message_event
from tests.chat.slack.conftest import fake_slack as fake_slack
from tests.chat.slack.fake_slack import FakeSlack, quicker_tiers
from tests.core.harness import SIMULATOR_ENV
from tests.doubles import signed_in
from tests.faults import test_instances
from tests.faults.forked import Zygote
from tests.faults.test_instances import LEASE, TAKEOVER_NOTICE, Instance, holder_of, stop_all
from tests.faults.test_instances import query as pg_query
from tests.faults.test_instances import settled as pg_settled
from tests.pg import Postgres

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.faults]

RESTART_NOTICE = "The bridge restarted while the agent was working"
KEPT = "The agent's conversation is kept"
LOST = "could not be reached from here"
# The cut-off request: acts (one line in ran.txt), then waits in its second model call.
LONG = "long-request [[calls 2]] [[tool run_command echo ran >> ran.txt]] [[wait never]]"
OPEN, CLOSE = "<thread-history>", "</thread-history>"


@dataclass
class SandboxedInstance(Instance):
    """An instance whose agy runs sandboxed, with its thread's private state under
    ``state_root`` (None: inside agy's state directories, found by every instance here)."""

    state_root: str | None = None

    def config(self) -> Path:
        command = json.dumps([sys.executable, "-m", "bridge.simulator"])
        root = self.root
        # Not beside the data directories: a config's folder is hidden from every sandbox.
        path = root / "etc" / f"{self.name}.toml"
        path.parent.mkdir(exist_ok=True)
        store = (
            f'url = "{self.url}"\ninstance = "{self.name}"\nlease_seconds = {LEASE}\n'
            "drain_seconds = 20\n"
        )
        state_root = f'state_root = "{root / self.state_root}"\n' if self.state_root else ""
        path.write_text(
            f'[bridge]\ndata_dir = "{root / ("data-" + self.name)}"\n'
            f"[agy]\ncommand = {command}\ninit_timeout = 20\nstop_grace = 2\n"
            f'isolation = "bwrap"\npass_env = {json.dumps(SIMULATOR_ENV)}\n'
            f'state_dirs = ["{root / "gemini"}"]\n{state_root}'
            f'[slack]\napi_url = "{self.fake.api_url}"\nallowed_users = ["{ALICE}", "{BOB}"]\n'
            f"[admin]\nenabled = true\nport = {self.port}\n"
            f"[approvals]\n{self.approvals}"
            f"[store]\n{store}"
            # One workspace for the channel: the same directory whichever instance runs it.
            f'[[workspaces]]\nchannel = "{CHANNEL}"\npath = "{root / "work"}"\n'
        )
        return path


@asynccontextmanager
async def instances(
    root: Path, fake: FakeSlack, url: str, roots: tuple[str | None, ...], zygote: Zygote
) -> AsyncIterator[list[SandboxedInstance]]:
    require_bwrap()
    fake.tiers = quicker_tiers(test_instances.SLACK_QUICKER)
    (root / "gemini").mkdir(exist_ok=True)
    (root / "work").mkdir(exist_ok=True)
    signed_in(root / "sim-home")
    names = "ab"
    started = [
        SandboxedInstance(names[n], root, fake, url, zygote=zygote, state_root=state)
        for n, state in enumerate(roots)
    ]
    try:
        # Side by side (most of a start is Python importing the bridge), as two_instances does.
        async with anyio.create_task_group() as tg:
            for inst in started:
                tg.start_soon(inst.start)
        yield started
    finally:
        await stop_all(*started)


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite://"))) as conn:
            return list(conn.execute(sql).fetchall())
    return pg_query(url, sql)


async def settled(url: str, timeout: float = 90) -> None:
    """Until nothing waits in the inbox and no turn runs."""
    if not url.startswith("sqlite:///"):
        await pg_settled(url, timeout)
        return
    with anyio.fail_after(timeout):
        while query(
            url,
            "SELECT 1 FROM inbox WHERE state = 'pending' UNION ALL "
            "SELECT 1 FROM turns WHERE state = 'running'",
        ):
            await anyio.sleep(0.05)


def conversation_of(url: str, ts: str) -> str | None:
    [(conversation,)] = query(
        url, f"SELECT conversation_id FROM threads WHERE key = 'slack|{CHANNEL}|{ts}'"
    )
    return str(conversation) if conversation else None


def requests_seen(root: Path) -> list[str]:
    """Every user message agy stored in any conversation of any private state, with the
    context blocks (history, notes) cut out: what agy was asked."""
    texts = []
    for path in sorted(root.rglob(f"{THREADS_DIR}/*/conversations/*.json")) + sorted(
        root.glob("*-state/*/*/conversations/*.json")
    ):
        data = json.loads(path.read_text("utf-8"))
        for message in data.get("messages", []):
            if message.get("role") in ("user", "injected"):
                text = message["text"]
                while OPEN in text:
                    start = text.index(OPEN)
                    end = text.find(CLOSE, start)
                    text = text[:start] + (text[end + len(CLOSE) :] if end >= 0 else "")
                texts.append(text)
    return texts


def first_messages(root: Path, conversation: str) -> list[str]:
    [path] = [
        *root.rglob(f"{THREADS_DIR}/*/conversations/{conversation}.json"),
        *root.glob(f"*-state/*/*/conversations/{conversation}.json"),
    ]
    data = json.loads(path.read_text("utf-8"))
    return [m["text"] for m in data["messages"] if m["role"] == "user"]


async def ran_lines(work: Path, count: int, timeout: float = 60) -> None:
    with anyio.fail_after(timeout):
        while _lines(work) < count:
            await anyio.sleep(0.05)


def _lines(work: Path) -> int:
    ran = work / "ran.txt"
    return len(ran.read_text().splitlines()) if ran.exists() else 0


async def cut_off(
    fake: FakeSlack, url: str, insts: list[SandboxedInstance], root: Path
) -> tuple[str, str, SandboxedInstance]:
    """A thread with one answered message, then the long request, cut off by a SIGKILL of the
    instance running it: (thread ts, conversation, the instance that is left or restarts)."""
    ts = fake.next_ts()
    first = insts[0]
    await fake.push_event(mention_event("remember the word zebra", ts=ts), via=first.ws)
    await fake.wait_for(lambda: "zebra" in fake.answer_text(CHANNEL, ts), 60)
    await settled(url)
    conversation = conversation_of(url, ts)
    assert conversation
    await fake.push_event(message_event(LONG, ts=fake.next_ts(), thread_ts=ts), via=first.ws)
    await ran_lines(root / "work", 1)
    if len(insts) == 2:
        victim, survivor = holder_of(url, insts[0], insts[1], ts)
    else:
        victim = survivor = insts[0]
    await victim.kill()
    return ts, conversation, survivor


async def ask_after(fake: FakeSlack, inst: SandboxedInstance, ts: str, text: str) -> str:
    """Write ``text`` in the thread at ``inst``; the agent's answer to it."""
    before = len(fake.answer_text(CHANNEL, ts))
    said = text.split(" [[")[0]

    def new() -> str:
        return fake.answer_text(CHANNEL, ts)[before:]

    await fake.push_event(message_event(text, ts=fake.next_ts(), thread_ts=ts), via=inst.ws)
    await fake.wait_for(lambda: said in new() and "History:" in new(), 60)
    return new()


async def status_says(fake: FakeSlack, inst: SandboxedInstance, ts: str, words: str) -> None:
    await fake.push_event(message_event("!status", ts=fake.next_ts(), thread_ts=ts), via=inst.ws)
    await fake.wait_for(lambda: words in fake.answer_text(CHANNEL, ts), 30)


async def retry_twice(
    fake: FakeSlack, url: str, inst: SandboxedInstance, ts: str, root: Path, *, click: bool
) -> None:
    """``!retry`` (or the notice's Retry button) runs the cut-off request once more, on
    purpose; a second one does not."""
    if click:
        [notice] = [
            m
            for m in fake.thread(CHANNEL, ts)
            if any(b.get("action_id") == RETRY_ACTION_ID for b in m.buttons)
        ]
        await fake.wait_ack(await fake.click(notice, BOB, RETRY_ACTION_ID, via=inst.ws))
    else:
        await fake.push_event(message_event("!retry", ts=fake.next_ts(), thread_ts=ts), via=inst.ws)
    await fake.wait_for(lambda: "sent to the agent again" in fake.answer_text(CHANNEL, ts), 30)
    await ran_lines(root / "work", 2)
    await settled(url)
    await fake.push_event(message_event("!retry", ts=fake.next_ts(), thread_ts=ts), via=inst.ws)
    await fake.wait_for(lambda: "sent again already" in fake.answer_text(CHANNEL, ts), 30)
    await settled(url)
    assert _lines(root / "work") == 2
    assert sum("long-request" in text for text in requests_seen(root)) == 2


async def a_takeover_after_sigkill_keeps_the_conversation_and_runs_the_cut_off_request_once(
    fake_slack: FakeSlack, url: str, a: Instance, b: Instance, tmp_path: Path
) -> None:
    """On the pair of the first sandboxed SIGKILL item (the same config: both instances find
    the private state), before its kills; the instance killed here starts again after."""
    assert isinstance(a, SandboxedInstance) and isinstance(b, SandboxedInstance)
    insts = [a, b]
    ts, conversation, survivor = await cut_off(fake_slack, url, insts, tmp_path)
    await fake_slack.wait_for(
        lambda: TAKEOVER_NOTICE in fake_slack.answer_text(CHANNEL, ts), LEASE * 3 + 30
    )
    notice = fake_slack.answer_text(CHANNEL, ts)
    assert KEPT in notice and "`!retry`" in notice
    (tmp_path / "work" / "never").touch()  # a second run would not wait: it would show
    answer = await ask_after(fake_slack, survivor, ts, "what was the word? [[history]]")
    await settled(url)
    # The same conversation: it remembers both earlier requests (the cut-off one too).
    assert conversation_of(url, ts) == conversation
    assert "History: 2 earlier user message(s)" in answer
    assert _lines(tmp_path / "work") == 1, "the cut-off request ran again by itself"
    assert sum("long-request" in text for text in requests_seen(tmp_path)) == 1
    # The note ahead of the next message tells agy not to redo it.
    [*_, after] = first_messages(tmp_path, conversation)
    assert OPEN in after and "Do not continue or redo" in after
    await status_says(fake_slack, survivor, ts, "kept after the interrupted turn")
    await retry_twice(fake_slack, url, survivor, ts, tmp_path, click=False)
    await (b if survivor is a else a).start()


async def test_a_takeover_where_the_state_is_out_of_reach_starts_anew_without_the_request(
    fake_slack: FakeSlack, postgres: Postgres, tmp_path: Path, zygote: Zygote
) -> None:
    """Each instance keeps agy's state on storage the other cannot reach (as two hosts)."""
    url = postgres.new_database()
    async with instances(tmp_path, fake_slack, url, ("a-state", "b-state"), zygote) as insts:
        ts, conversation, survivor = await cut_off(fake_slack, url, insts, tmp_path)
        await fake_slack.wait_for(
            lambda: TAKEOVER_NOTICE in fake_slack.answer_text(CHANNEL, ts), LEASE * 3 + 30
        )
        notice = fake_slack.answer_text(CHANNEL, ts)
        assert LOST in notice and KEPT not in notice
        await status_says(fake_slack, survivor, ts, "out of reach here after the interrupted turn")
        (tmp_path / "work" / "never").touch()
        answer = await ask_after(fake_slack, survivor, ts, "what was the word? [[history]]")
        await settled(url)
        fresh = conversation_of(url, ts)
        assert fresh and fresh != conversation
        assert "History: 0 earlier user message(s)" in answer
        assert "Context: 1 block(s) read, not acted on" in answer
        assert _lines(tmp_path / "work") == 1, "the cut-off request ran again from the history"
        assert sum("long-request" in text for text in requests_seen(tmp_path)) == 1
        # The history: answered and cut-off requests told apart, then where requests begin.
        [given] = first_messages(tmp_path, fresh)
        history = given[: given.index(CLOSE)]
        assert "[answered]" in history and "zebra" in history
        assert "[INTERRUPTED, not to be redone" in history and "long-request" in history
        assert given.index("Only the messages after this history are new requests") < given.index(
            "what was the word"
        )
        await status_says(fake_slack, survivor, ts, "a new one after the interrupted turn")
        # Bob clicks the notice's Retry button: the request runs again, as Alice wrote it.
        await retry_twice(fake_slack, url, survivor, ts, tmp_path, click=True)


async def test_a_single_instance_restarting_after_sigkill_keeps_the_conversation(
    fake_slack: FakeSlack, tmp_path: Path, zygote: Zygote
) -> None:
    url = f"sqlite:///{tmp_path / 'bridge.sqlite3'}"
    async with instances(tmp_path, fake_slack, url, (None,), zygote) as insts:
        ts, conversation, inst = await cut_off(fake_slack, url, insts, tmp_path)
        await inst.start()
        await fake_slack.wait_for(lambda: RESTART_NOTICE in fake_slack.answer_text(CHANNEL, ts), 60)
        assert KEPT in fake_slack.answer_text(CHANNEL, ts)
        (tmp_path / "work" / "never").touch()
        answer = await ask_after(fake_slack, inst, ts, "what was the word? [[history]]")
        assert "History: 2 earlier user message(s)" in answer
        assert conversation_of(url, ts) == conversation
        assert _lines(tmp_path / "work") == 1
        await retry_twice(fake_slack, url, inst, ts, tmp_path, click=True)


def private_conversation_messages(sim_home: Path, roles: Iterable[str]) -> list[str]:
    """``sim_conversation_messages`` for sandboxed agy: every thread's private state."""
    wanted = set(roles)
    texts = []
    for path in sorted(sim_home.glob(f"{THREADS_DIR}/*/conversations/*.json")):
        data = json.loads(path.read_text("utf-8"))
        texts += [m["text"] for m in data.get("messages", []) if m.get("role") in wanted]
    return texts


# Ten of the unsandboxed run's twenty cycles (each instance killed five times), as four items
# the workers share (two or three cycles each; the first, with the takeover that keeps the
# conversation, two): with forked starts (tests/faults/forked.py) a pair more costs about
# 0.6 s of CPU, and three items of three or four took 23-40 s under load.
SANDBOXED_CYCLES = 10
SANDBOXED_PARTS = 4


@pytest.mark.timeout(300)
@pytest.mark.parametrize("part", range(SANDBOXED_PARTS))
async def test_sigkill_under_load_with_sandboxed_agy_and_its_private_state(
    fake_slack: FakeSlack,
    postgres: Postgres,
    tmp_path: Path,
    zygote: Zygote,
    monkeypatch: pytest.MonkeyPatch,
    part: int,
) -> None:
    """The fault suite's SIGKILL-against-alternating-instances run (tests/faults/
    test_instances.py), with agy sandboxed and each thread's private state where both
    instances find it: kills land before, during and after turns, takeovers wait for the lost
    sandbox's lock; nothing is lost, nothing reaches agy twice, every cut-off is reported.
    Ten kill cycles (each victim killed five times), as items the workers share; the
    unsandboxed run has twenty."""
    require_bwrap()
    (tmp_path / "gemini").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.setattr(test_instances, "Instance", SandboxedInstance)
    monkeypatch.setattr(test_instances, "sim_conversation_messages", private_conversation_messages)
    cycles = test_instances.kill_cycles(part, SANDBOXED_PARTS, SANDBOXED_CYCLES)
    # The first item (two cycles) runs the takeover that keeps the conversation on its pair
    # first.
    before = (
        a_takeover_after_sigkill_keeps_the_conversation_and_runs_the_cut_off_request_once
        if part == 0
        else None
    )
    await test_instances.sigkill_against_alternating_instances(
        fake_slack, postgres, tmp_path, zygote, cycles, before
    )
