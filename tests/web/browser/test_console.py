"""The web console in a real browser: signing in through a `!web` link from the Slack fake, a
turn streaming into the live page (and the same page with JavaScript off), approving a gated
command so that agy's hook answers `allow`, and what may not work: controls for a person who
may not approve, forged POSTs (another site, a person who may not, another channel's thread),
used and expired links, and a link opened by a preview bot."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from bridge.core.store.rows import ApprovalState
from bridge.web import live as live_events
from bridge.web.pages import seen_thread
from tests.chat.slack.conftest import ALICE, BOB, OTHER_CHANNEL
from tests.chat.slack.fake_slack import FakeSlack, serve_fake_slack
from tests.web.browser.chrome import Page
from tests.web.browser.console import CAROL, Live, live_console
from tests.web.serve import serve

pytestmark = pytest.mark.anyio


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with serve_fake_slack() as slack:
        yield slack


async def _until(predicate: Callable[[], Awaitable[bool]], seconds: float = 30) -> None:
    with anyio.fail_after(seconds):
        while not await predicate():
            await anyio.sleep(0.02)


async def test_sign_in_through_a_web_link_and_watch_a_turn_stream(
    page: Page, fake: FakeSlack, tmp_path: Path
) -> None:
    tool_go, answer_go = tmp_path / "tool-go", tmp_path / "answer-go"
    async with live_console(fake, tmp_path) as live:
        await live.sign_in(page, ALICE, "alice")
        assert "Threads" in await page.text_of("h1")
        ts = await live.say(
            f"[[tool run_command until test -e {tool_go}; do sleep 0.05; done]] "
            f"[[narrate Looking at the build first.]] [[calls 2]] [[wait {answer_go}]] "
            "[[long 12]] why is the build red?"
        )
        await page.open(live.page_of(ts))
        # The tool call shows while it runs (rendered, or streamed in if the turn began later).
        await page.wait_text("#live-tools", f"until test -e {tool_go}")
        # (The page reads itself again when the turn begins: wait, do not read once.)
        await page.wait_text("#state", "running")

        # JavaScript off: the same page, read-only, as it was when loaded.
        await page.javascript(enabled=False)
        await page.open(live.page_of(ts))
        assert f"until test -e {tool_go}" in await page.text_of("#live-tools")
        assert await page.text_of("#state") == "running"
        await page.javascript(enabled=True)

        await page.open(live.page_of(ts))
        await page.wait_text("#live-tools", f"until test -e {tool_go}")
        tool_go.touch()
        # What the turn says arrives in the open page while the turn still runs.
        await page.wait_text("#live-text", "Looking at the build first.")
        await page.wait_text("#state", "running")
        answer_go.touch()
        # The end reloads the page: no turn runs, the turn is listed as done.
        await page.wait_text("#no-turn", "No turn is running")
        assert "done" in await page.text_of("#turns")
        assert await page.outside_requests() == []


async def test_a_page_whose_turn_ended_before_its_stream_opened_shows_the_end(
    page: Page, fake: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the page's rendering and its event stream's opening, the turn may end (a slow
    page, a busy machine): the stream must then say so, or the page shows "running" forever
    (it did: the approval test below failed that way under load)."""
    go = tmp_path / "go"
    opened = anyio.Event()
    stream_asked = anyio.Event()

    async def held(request: Any, visit: Any, key: str) -> Any:
        # The event stream's request waits here until the turn has ended.
        stream_asked.set()
        await opened.wait()
        return await seen_thread(request, visit, key)

    monkeypatch.setattr(live_events, "seen_thread", held)
    async with live_console(fake, tmp_path) as live:
        await live.sign_in(page, ALICE, "alice")
        ts = await live.say(f"[[waitfirst {go}]] [[reply all done]] and then?")
        key = live.thread(ts).key

        async def running() -> bool:
            return live.bridge.core.live.current(key) is not None

        await _until(running)
        await page.open(live.page_of(ts))  # rendered with the turn running
        assert await page.text_of("#state") == "running"
        with anyio.fail_after(30):
            await stream_asked.wait()
        go.touch()

        async def ended() -> bool:
            return not await running()

        await _until(ended)
        opened.set()  # now the stream opens, after the turn's end
        await page.wait_text("#no-turn", "No turn is running")
        assert "all done" in await page.text_of("#turns")


async def _request_in(live: Live, channel: str, user: str, name: str) -> tuple[str, str]:
    """A gated command asked in a new thread of ``channel``: (thread ts, request id)."""
    ts = await live.say(f"[[tool run_command touch {name}]]", user=user, channel=channel)
    key = live.thread(ts, channel).key

    async def waiting() -> bool:
        return bool(await live.bridge.store.waiting_approvals(key))

    await _until(waiting)
    [row] = await live.bridge.store.waiting_approvals(key)
    return ts, row.id


async def _forge(page: Page, action: str, fields: dict[str, str]) -> None:
    """A form the page did not offer, posted from the page (the person's own cookie goes)."""
    await page.call(
        page.driver.execute_script,
        """const [action, fields] = arguments;
        const form = document.createElement("form");
        form.method = "post"; form.action = action;
        for (const [name, value] of Object.entries(fields)) {
          const input = document.createElement("input");
          input.type = "hidden"; input.name = name; input.value = value;
          form.appendChild(input);
        }
        document.body.appendChild(form); form.submit();""",
        action,
        fields,
    )


async def _csrf(page: Page) -> str:
    element = await page.element('input[name="csrf"]')
    return str(await page.call(element.get_attribute, "value"))


async def test_approve_from_the_browser_and_agy_is_told_allow(
    page: Page, fake: FakeSlack, tmp_path: Path
) -> None:
    approvals = {"mode": "ask", "timeout": 120, "approvers": [ALICE]}
    async with live_console(fake, tmp_path, approvals=approvals) as live:
        ts, request_id = await _request_in(live, "C0GENERAL", BOB, "ran.txt")
        key = live.thread(ts).key

        # Bob sees the request in his channel's thread, but no control: he is no approver.
        await live.sign_in(page, BOB, "bob")
        await page.open(live.page_of(ts))
        await page.wait_text(".approval", "touch ran.txt")
        assert await page.count("button.approve") == 0 and await page.count("#stop") == 0
        # A form he builds himself, with his own valid token, is refused all the same.
        fields = {"csrf": await _csrf(page), "t": key, "approval": request_id, "choice": "approve"}
        await _forge(page, "/thread/decide", fields)
        await page.wait_text("#message", "Refused: you may not act in that thread.")
        row = await live.bridge.store.approval(request_id)
        assert row is not None and row.state is ApprovalState.WAITING

        # Alice, an approver, signs in (the browser's cookies are cleared first) and approves.
        await page.call(page.driver.delete_all_cookies)
        await live.sign_in(page, ALICE, "alice")
        await page.open(live.page_of(ts))
        await page.click("button.approve")

        async def approved() -> bool:
            row = await live.bridge.store.approval(request_id)
            return row is not None and row.state is ApprovalState.APPROVED

        await _until(approved)
        # agy's PreToolUse hook was answered allow (the simulator's real hook path): it ran
        # the command in the thread's workspace.
        await _until(lambda: _ran(tmp_path, "ran.txt"))
        await page.wait_text("#no-turn", "No turn is running")
        assert "done" in await page.text_of("#turns")


async def _ran(root: Path, name: str) -> bool:
    return any((root / "data").rglob(name))


async def test_forged_posts_from_another_site_and_for_another_channel_are_refused(
    page: Page, fake: FakeSlack, tmp_path: Path
) -> None:
    approvals = {"mode": "ask", "timeout": 120, "approvers": [ALICE, CAROL]}
    async with live_console(fake, tmp_path, approvals=approvals) as live:
        ts, request_id = await _request_in(live, "C0GENERAL", BOB, "mine.txt")
        other_ts, other_id = await _request_in(live, OTHER_CHANNEL, CAROL, "theirs.txt")
        await live.sign_in(page, ALICE, "alice")
        await page.open(live.page_of(ts))
        csrf = await _csrf(page)

        # Another channel's thread, with Alice's own valid token: she is not in that channel.
        other_key = live.thread(other_ts, OTHER_CHANNEL).key
        await _forge(
            page,
            "/thread/decide",
            {"csrf": csrf, "t": other_key, "approval": other_id, "choice": "approve"},
        )
        await page.wait_text("#message", "Refused: you may not act in that thread.")
        # Her thread's key with the other thread's request: refused too.
        key = live.thread(ts).key
        await _forge(
            page,
            "/thread/decide",
            {"csrf": csrf, "t": key, "approval": other_id, "choice": "approve"},
        )
        await page.wait_text("#message", "Refused: you may not act in that thread.")
        # Her own request, without the token.
        await page.open(live.page_of(ts))
        await _forge(page, "/thread/decide", {"t": key, "approval": request_id, "choice": "deny"})
        await page.wait_text("#message", "Refused: this form did not come from your console page")

        # Another site's page posting to the console as soon as it loads.
        decision = {"t": key, "approval": request_id, "choice": "approve"}
        async with _attacker_site(f"{live.base}/thread/decide", decision) as evil:
            await page.open(evil)
            await page.wait_for(
                lambda d: d.current_url.startswith(live.base), "the forged form to land"
            )
            # SameSite=Strict: the browser did not send Alice's cookie with it.
            await page.wait_text("#how-to-sign-in", "!web")

        # Signing her in as someone else (Bob's own link, posted by his page): refused, as
        # the form comes from another site; Alice stays herself.
        bobs_link = await live.link(BOB)
        async with _attacker_site(bobs_link, {}) as evil:
            await page.open(evil)
            await page.wait_text("#message", "Refused: this form did not come from")
        await page.open(live.base + "/")
        await page.wait_text("#who", "alice")
        for rid in (request_id, other_id):
            row = await live.bridge.store.approval(rid)
            assert row is not None and row.state is ApprovalState.WAITING, rid
        assert not await _ran(tmp_path, "theirs.txt") and not await _ran(tmp_path, "mine.txt")


@asynccontextmanager
async def _attacker_site(action: str, fields: dict[str, str]) -> AsyncIterator[str]:
    """A page on another site (``localhost``, the console being on 127.0.0.1) that posts a
    form to ``action`` as soon as it loads; yields its address."""
    inputs = "".join(
        f'<input name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in fields.items()
    )
    page = (
        f'<!doctype html><body><form id="f" method="post" action="{html.escape(action)}">'
        f"{inputs}</form><script>document.getElementById('f').submit()</script></body>"
    )

    async def home(_: Request) -> HTMLResponse:
        return HTMLResponse(page)

    async with serve(Starlette(routes=[Route("/", home)])) as base:
        yield base.replace("127.0.0.1", "localhost") + "/"


async def test_used_expired_and_previewed_links_do_not_sign_in(
    page: Page, fake: FakeSlack, tmp_path: Path
) -> None:
    async with live_console(fake, tmp_path) as live:
        # A preview bot (a plain GET, as Slack's unfurler makes) does not use the link.
        link = await live.link(ALICE)
        async with aiohttp.ClientSession() as http:
            headers = {"User-Agent": "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"}
            async with http.get(link, headers=headers) as answer:
                assert answer.status == 200
                assert "agy_console" not in answer.cookies
        await page.open(link)
        assert await page.cookies() == []  # the GET alone sets no session either
        await page.click("#signin")
        await page.wait_text("#who", "alice")

        # The same link again: used.
        await page.call(page.driver.delete_all_cookies)
        await page.open(link)
        await page.wait_text("#message", "This sign-in link is used, expired or not valid")
        assert await page.count("#signin") == 0 and await page.count("#who") == 0
        assert await page.cookies() == []

        # A fresh link whose time has passed (the store's clock for it moved on).
        late = await live.link(ALICE)
        await live.bridge.store.database.execute("UPDATE web_links SET expires_at = 0", ())
        await page.open(late)
        await page.wait_text("#message", "This sign-in link is used, expired or not valid")
        assert await page.count("#signin") == 0 and await page.count("#who") == 0
        assert await page.cookies() == []
