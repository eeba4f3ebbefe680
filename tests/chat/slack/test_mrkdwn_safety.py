"""What a person sees in Slack is what the bridge meant: attacks through mrkdwn.

An approval request must show the command exactly as it will run: a command holding
``<!channel>`` would ping the whole channel, ``<https://x|ls>`` would show "ls" in place of the
command. The agent's own answers never ping the channel. The Slack fake renders mrkdwn as Slack
does (``Message.rendered``, ``Message.pings``, ``Message.links``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.chat.slack.approvals import DENY_ACTION_ID, request_blocks
from bridge.chat.slack.format import BroadcastGuard, mrkdwn_escape, neutralise_broadcasts
from bridge.core.approvals.texts import request_text
from bridge.core.events import ApprovalRequest, ThreadRef
from tests.chat.slack.conftest import BOB, CHANNEL, mention_event, message_event
from tests.chat.slack.fake_slack import FakeSlack, Message, render_markdown, render_mrkdwn
from tests.chat.slack.test_approvals import approvals, click, request
from tests.chat.slack.test_end_to_end import live_bridge

pytestmark = pytest.mark.anyio


def typed(text: str) -> str:
    """A message as Slack delivers what a person typed: its control characters escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_the_fake_renders_mrkdwn_as_slack_does() -> None:
    shown = render_mrkdwn("hi <!channel> <https://x.example|ls> a &lt;b&gt; &amp; <@U1>")
    assert shown.text == "hi @channel ls a <b> & @U1"
    assert shown.pings == ("channel",) and shown.links == (("https://x.example", "ls"),)
    assert render_mrkdwn("<!subteam^S1|@devs>").pings == ("subteam^S1",)
    assert render_markdown("see [docs](https://d.example) `x<y`").links == (
        ("https://d.example", "docs"),
    )


async def test_a_request_shows_the_command_exactly_and_pings_no_one(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    command = "echo <!channel> && cat <https://x.example|ls> && echo a&lt;b > out.txt"
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event(typed(f"[[tool run_command {command}]]"), ts=ts))
        asked = await request(fake_slack, ts)
        assert asked.pings == [], "the request pinged the channel"
        assert asked.links == [], "the request shows a link in place of the command"
        assert command in asked.rendered, "the request does not show what will run"
        assert "```\n" + command + "\n```" in asked.rendered, "the command is in a code block"
        assert "Reply `approve 1`, or `deny 1: <reason>`" in asked.rendered, (
            "the bridge's own hint renders wrong"
        )
        assert render_mrkdwn(asked.text or "").pings == ()
        assert command in render_mrkdwn(asked.text or "").text, "the fallback shows the command"
        await click(fake_slack, asked, BOB, DENY_ACTION_ID)
        await live.answer(ts, "denied by bob")
        assert asked.pings == [] and command in asked.rendered, "the decision shows it too"


def _request(summary: str, preview: str = "") -> ApprovalRequest:
    return ApprovalRequest(
        id="r",
        thread=ThreadRef(platform="slack", channel=CHANNEL, thread="1.2"),
        tool="run_command",
        summary=summary,
        preview=preview,
        text=request_text(
            tool="run_command", summary=summary, preview=preview, requested_by=None, timeout=60
        ),
    )


@pytest.mark.parametrize("char", ["&", "<", ">", "x"])
def test_a_long_command_fits_slacks_limits_escaped_and_is_never_cut_in_an_entity(
    char: str,
) -> None:
    summary = char * 2400 + "<!here>" + char * 100
    blocks = request_blocks(_request(summary, preview="&" * 900))
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    assert all(len(text) <= 3000 for text in sections), "a section is over Slack's limit"
    message = Message(channel=CHANNEL, ts="1.3", user="U", blocks=blocks)
    assert message.pings == []
    # Sections join with a line break; a code block cut between two is closed and reopened.
    shown = message.rendered.replace("\n```\n```\n", "")
    assert summary[:2500] in shown, "the command is not shown whole"
    assert "&" * 900 in shown, "the preview is not shown whole"
    for text in sections:
        # A cut inside "&amp;" would leave "&am" or the like: every & starts an entity.
        for at in [i for i, c in enumerate(text) if c == "&"]:
            assert text[at:].startswith(("&amp;", "&lt;", "&gt;")), text[at : at + 6]


def test_mrkdwn_escape_and_broadcasts() -> None:
    assert mrkdwn_escape("a & <b> c") == "a &amp; &lt;b&gt; c"
    for ping in ("<!channel>", "<!here>", "<!everyone>", "<!subteam^S1|@devs>", "@here"):
        safe = neutralise_broadcasts(f"hi {ping} there")
        assert render_markdown(safe).pings == (), ping
        assert render_mrkdwn(safe).pings == (), ping
    assert neutralise_broadcasts("mail me@here.example") == "mail me@here.example"


async def test_the_agents_answer_never_pings_the_channel(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    reply = (
        "Done <!channel>, <!here|here> and <!subteam^S0DEVS> @everyone: "
        "see [the docs](https://docs.example/x?a=1&b=2) and run `make test`."
    )
    async with live_bridge(fake_slack, tmp_path) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event(typed(f"[[reply {reply}]]"), ts=ts))
        await live.answer(ts, "make test")
        [answer] = fake_slack.answer_messages(CHANNEL, ts)
        assert answer.pings == [], "the agent's answer pinged the channel"
        assert ("https://docs.example/x?a=1&b=2", "the docs") in answer.links
        assert "`make test`" in answer.visible, "code still renders as code"
        # Every message of ours in the thread (the streamed ones, the tool log) too.
        assert all(m.pings == [] for m in fake_slack.thread(CHANNEL, ts))


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7])
def test_a_mention_split_across_streamed_pieces_is_caught(step: int) -> None:
    text = "a <!channel> b @here c <!subteam^S1|@devs> <!-- kept --> me@here.example @everyone"
    guard = BroadcastGuard()
    pieces = [guard.feed(text[i : i + step]) for i in range(0, len(text), step)]
    joined = "".join(pieces) + guard.flush()
    assert joined == neutralise_broadcasts(text)
    assert render_markdown(joined).pings == ()
    assert "<!-- kept -->" in joined and "me@here.example" in joined


async def test_an_edit_into_an_answer_decides_nothing(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command touch e.txt]]", ts=ts))
        asked = await request(fake_slack, ts)
        said = fake_slack.next_ts()
        await fake_slack.push_event(message_event("sounds fine", user=BOB, ts=said, thread_ts=ts))
        # Bob edits his message into "approve": Slack sends message_changed.
        edited = message_event("approve", user=BOB, ts=said, thread_ts=ts)
        await fake_slack.push_event(
            {
                "type": "message",
                "subtype": "message_changed",
                "channel": CHANNEL,
                "ts": fake_slack.next_ts(),
                "message": {**edited, "edited": {"user": BOB, "ts": said}},
                "previous_message": message_event("sounds fine", user=BOB, ts=said),
            }
        )
        await click(fake_slack, asked, BOB, DENY_ACTION_ID)
        await live.answer(ts, "denied by bob")
        assert "Denied by bob" in asked.rendered, "the edit decided the request"
