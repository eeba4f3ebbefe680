"""The App Home tab (``views.publish``): a person's threads and the approvals waiting for them,
republished (rate-limited) when they change; usage and schedules only where a provider is
wired; the bridge's health only for admins."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from bridge.core.events import ThreadRef
from bridge.core.home import (
    HomeSources,
    ScheduleLine,
    ThreadLine,
    UsageLine,
    WaitingLine,
)
from tests.chat.slack.conftest import ALICE, BOB, CHANNEL, MALLORY, RecordingInbound
from tests.chat.slack.conftest import running_adapter as adapter_on
from tests.chat.slack.fake_slack import FakeSlack
from tests.chat.slack.test_approvals import APPROVE_ACTION_ID, approvals, click, request
from tests.chat.slack.test_end_to_end import live_bridge

pytestmark = pytest.mark.anyio

DM_ALICE = "D0ALICE1"
THREAD = ThreadRef(platform="slack", channel=CHANNEL, thread="1700000001.000001")


@dataclass
class Facts:
    threads: list[ThreadLine] = field(default_factory=list)
    waiting: list[WaitingLine] = field(default_factory=list)
    asked: int = 0

    async def active_threads(self, platform: str, user_id: str) -> list[ThreadLine]:
        self.asked += 1
        return self.threads if user_id == ALICE else []

    async def waiting_for(self, platform: str, user_id: str) -> list[WaitingLine]:
        return self.waiting if user_id == ALICE else []


class Usage:
    async def usage_for(self, platform: str, user_id: str) -> list[UsageLine]:
        return [UsageLine("tokens this month", 12_500, 50_000)]


class Schedules:
    async def schedules_for(self, platform: str, user_id: str) -> list[ScheduleLine]:
        return [ScheduleLine(THREAD, "every weekday at 09:00", "check the nightly build")]


class Health:
    async def health(self) -> list[str]:
        return ["Agent slots: 1/4 in use, 0 thread(s) in line"]


def line(title: str = "fix the flaky test", working: bool = False) -> ThreadLine:
    return ThreadLine(THREAD, title, working, 0.0)


async def test_the_home_tab_lists_threads_and_waits_and_only_the_wired_sections(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    fake.agent_view.home_tab_enabled = True
    facts = Facts([line(working=True)], [WaitingLine(THREAD, "run_command", "make deploy", "", 0)])
    async with adapter_on(fake, inbound, tmp_path) as adapter:
        adapter.serve_home(HomeSources(facts=facts))
        await fake.wait_ack(await fake.agent_view.open_home_tab(ALICE, DM_ALICE))
        await fake.wait_for(lambda: ALICE in fake.agent_view.views)
        plain = fake.agent_view.views[ALICE].text
        adapter.serve_home(HomeSources(facts, Usage(), Schedules(), Health()))
        await fake.wait_ack(await fake.agent_view.open_home_tab(BOB, "D0BOB001"))
        await fake.wait_for(lambda: BOB in fake.agent_view.views)
        bob = fake.agent_view.views[BOB].text

    assert "fix the flaky test" in plain and "working now" in plain
    link = f"https://fake.slack.com/archives/{CHANNEL}/p1700000001000001"
    assert f"<{link}|fix the flaky test>" in plain
    assert "`make deploy` (run_command)" in plain
    assert "Your usage" not in plain and "Schedules" not in plain and "health" not in plain
    # Bob: the wired sections, no health (not an admin), and none of Alice's threads.
    assert "No active threads" in bob and "Nothing waits for your approval." in bob
    assert "tokens this month: 12,500 of 50,000 (25%)" in bob
    assert "every weekday at 09:00" in bob and "check the nightly build" in bob
    assert "Bridge health" not in bob


async def test_admins_see_the_health_and_strangers_get_no_page(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    fake.agent_view.home_tab_enabled = True
    async with adapter_on(fake, inbound, tmp_path, admins=[ALICE]) as adapter:
        adapter.serve_home(HomeSources(Facts(), health=Health()))
        await fake.wait_ack(await fake.agent_view.open_home_tab(MALLORY, "D0MALLORY"))
        await fake.wait_ack(await fake.agent_view.open_home_tab(ALICE, DM_ALICE))
        await fake.wait_for(lambda: ALICE in fake.agent_view.views)

    assert "Agent slots: 1/4 in use" in fake.agent_view.views[ALICE].text
    assert MALLORY not in fake.agent_view.views


async def test_changes_are_republished_at_most_once_per_interval(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    fake.agent_view.home_tab_enabled = True
    facts = Facts([line()])
    async with adapter_on(fake, inbound, tmp_path, home_interval=0.5) as adapter:
        adapter.serve_home(HomeSources(facts))
        await fake.wait_ack(await fake.agent_view.open_home_tab(ALICE, DM_ALICE))
        await fake.wait_for(lambda: ALICE in fake.agent_view.views)
        for n in range(5):  # a burst of changes
            facts.threads = [line(f"title {n}")]
            adapter._agent_x.home.changed()
        await fake.wait_for(lambda: "title 4" in fake.agent_view.views[ALICE].text)
        adapter._agent_x.home.changed()  # nothing new: read again, but no publish
        with anyio.fail_after(5):
            while facts.asked < 3:
                await anyio.sleep(0.05)

    assert len(fake.ok_calls("views.publish")) == 2


async def test_a_home_tab_that_is_off_is_noted_once(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake = fake_slack
    async with adapter_on(fake, inbound, tmp_path, home_interval=0.0) as adapter:
        adapter.serve_home(HomeSources(Facts([line()])))
        await fake.wait_ack(await fake.agent_view.open_home_tab(ALICE, DM_ALICE))
        await fake.wait_for(lambda: bool(fake.calls_to("views.publish")))
        await fake.wait_ack(await fake.agent_view.open_home_tab(ALICE, DM_ALICE))
        adapter._agent_x.home.changed()

    [refused] = fake.calls_to("views.publish")
    assert refused.error == "not_enabled"


async def test_the_page_lists_a_thread_and_its_approval_then_is_republished_when_answered(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    """Through the whole bridge: the core's facts from the store."""
    fake = fake_slack
    fake.agent_view.home_tab_enabled = True
    async with live_bridge(fake, tmp_path, approvals()):
        ts = fake.next_ts()
        await fake.push_event(
            {
                "type": "app_mention",
                "channel": CHANNEL,
                "user": ALICE,
                "text": "<@UBOT0001> [[tool run_command touch ok.txt]]",
                "ts": ts,
                "event_ts": ts,
                "team": "T0FAKE01",
            }
        )
        asked = await request(fake, ts)
        await fake.wait_ack(await fake.agent_view.open_home_tab(ALICE, DM_ALICE))
        await fake.wait_for(
            lambda: (
                ALICE in fake.agent_view.views
                and "touch ok.txt" in fake.agent_view.views[ALICE].text
            ),
            30,
        )
        first = fake.agent_view.views[ALICE].text
        await click(fake, asked, BOB, APPROVE_ACTION_ID)
        await fake.wait_for(
            lambda: "Nothing waits for your approval." in fake.agent_view.views[ALICE].text, 30
        )

    assert "[[tool run_command touch ok.txt]]" in first  # the thread, titled by its first line
    assert "`touch ok.txt` (run_command)" in first
    assert fake.agent_view.views[ALICE].published >= 2


async def test_a_publish_without_a_token_to_spare_waits_for_one(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """views.publish is optional in the app's budget: with its bucket empty the page waits
    for the next token instead of taking one an answer needs, and then comes."""
    from bridge.chat.slack.budget import RateBudget
    from bridge.chat.slack.tiers import SLACK_TIERS, Tier

    fake = fake_slack
    fake.agent_view.home_tab_enabled = True
    tiers = {**SLACK_TIERS, "views.publish": Tier(2, window=1.0, burst=1.0)}
    budget = RateBudget(tiers=dict(tiers))
    facts = Facts([line()])
    async with adapter_on(fake, inbound, tmp_path, budget=budget, home_interval=0.0) as adapter:
        adapter.serve_home(HomeSources(facts))
        await fake.wait_ack(await fake.agent_view.open_home_tab(ALICE, DM_ALICE))
        await fake.wait_for(lambda: ALICE in fake.agent_view.views)
        facts.threads = [line("second")]
        adapter._agent_x.home.changed()
        facts.threads = [line("third")]
        adapter._agent_x.home.changed()
        await fake.wait_for(lambda: "third" in fake.agent_view.views[ALICE].text)

    assert not fake.limited  # never past Slack's rate: no 429
    assert budget.stats["views.publish"].deferred >= 1
