"""What reaches the audit trail beside turns and commands: approval requests and decisions,
files the agent posts, tool calls agy refused; and the usage counters' bounded labels."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bridge.config import build_config
from bridge.core.events import ApprovalChoice, Author
from bridge.core.store.opening import open_store
from bridge.core.store.rows import MessageState, StoredMessage
from bridge.core.team.audit import AuditLog
from bridge.core.team.controls import TeamControls
from bridge.core.team.metrics import OTHER, UsageMetrics
from bridge.core.team.usage import Share, Tokens, TurnUsage
from bridge.core.thread.turn_policy import Hold, Refuse
from bridge.metrics import PREFIX, Metrics
from tests.core.harness import Harness, running, thread

pytestmark = pytest.mark.anyio

BOB = Author(id="@bob:test", display_name="Bob")


async def trail(h: Harness) -> list[tuple[str, str, dict[str, object]]]:
    records = await AuditLog(h.bridge.store.database).records()
    return [(r.kind, r.person, r.detail) for r in records]


async def test_approvals_and_their_decisions_are_recorded(tmp_path: Path) -> None:
    extra = {"approvals": {"mode": "ask", "timeout": 60, "approvers": [BOB.id]}}
    async with running(tmp_path, extra=extra) as h:
        await h.say("[[tool run_command touch ran.txt]]")
        await h.adapter.changes.until(lambda: h.adapter.requests)
        await h.bridge.core.decide(thread(), "req-1", ApprovalChoice.DENY, BOB, "not today")
        done = await h.adapter.wait_finished(1)
        await h.adapter.changes.until(lambda: done[0].closed)
        records = await trail(h)
    kinds = [kind for kind, _, _ in records]
    assert kinds[:3] == ["turn_started", "approval_requested", "approval_decided"]
    _, asker, asked = records[1]
    assert asker == "@alice:test" and asked["summary"] == "touch ran.txt"
    _, decider, decided = records[2]
    assert decider == BOB.id and decided["decision"] == "denied"
    assert decided["reason"] == "not today" and decided["request"] == asked["request"]
    [tool] = [detail for kind, _, detail in records if kind == "tool_call"]
    assert tool["tool"] == "run_command" and tool["outcome"] in ("denied", "error")


async def test_a_posted_file_is_recorded_with_its_digest(tmp_path: Path) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    (work / "report.txt").write_text("all green\n")
    call = json.dumps({"path": "report.txt", "title": "Report"})
    async with running(tmp_path, {"workspaces": [{"path": str(work)}]}) as h:
        await h.say(f"share it [[mcp bridge_chat post_file {call}]]")
        done = await h.adapter.wait_finished(1)
        await h.adapter.changes.until(lambda: done[0].closed)
        records = await trail(h)
    [posted] = [detail for kind, _, detail in records if kind == "file_posted"]
    assert posted["file"] == "report.txt" and posted["bytes"] == 10
    assert posted["sha256"] == hashlib.sha256(b"all green\n").hexdigest()
    assert posted["title"] == "Report"


def test_usage_counters_keep_their_label_sets_bounded() -> None:
    metrics = Metrics()
    usage = UsageMetrics(metrics, limit=2)
    for n in range(4):
        share = Share(f"@p{n}", f"P{n}", Tokens(total=10), 0.5)
        usage.turn(f"C{n}", TurnUsage(n, f"model-{n}", Tokens(total=10), 0.5, (share,)))
    registry = metrics.registry

    def tokens(model: str, channel: str, person: str) -> float | None:
        labels = {"model": model, "channel": channel, "person": person}
        return registry.get_sample_value(PREFIX + "usage_tokens_total", labels)

    assert tokens("model-0", "C0", "@p0") == 10
    assert tokens("model-1", "C1", "@p1") == 10
    assert tokens(OTHER, OTHER, OTHER) == 20  # the third and fourth of each
    cost = registry.get_sample_value(
        PREFIX + "usage_cost_total", {"model": OTHER, "channel": OTHER, "person": OTHER}
    )
    assert cost == 1.0


async def test_another_policys_refusal_and_hold_are_recorded(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'store.sqlite3'}") as store:
        config = build_config({}, environ={})
        team = TeamControls(store.database, config, AuditLog(store.database), Metrics())
        ref = thread()
        waiting = StoredMessage(
            id=1,
            thread_key=ref.key,
            message_id="m1",
            author=BOB,
            text="deploy it",
            state=MessageState.IN_TURN,
            received_at=0.0,
        )
        await team.judged(ref, None, Refuse("out of hours"), [waiting], 7, "conv")
        await team.judged(ref, None, Hold("after the freeze"), [waiting], 8)
        records = await team.audit.records()
    assert [(r.kind, r.person) for r in records] == [
        ("turn_refused", BOB.id),
        ("turn_held", BOB.id),
    ]
    assert records[0].detail["reason"] == "out of hours"
    assert records[0].detail["into_running_turn"] is False
    assert records[1].detail["into_running_turn"] is True
