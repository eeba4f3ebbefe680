"""The browser harness itself, against a small page of the test's own: a form that signs in
with a cookie, a live page fed by Server-Sent Events, a page read with JavaScript off, the
artifacts of a failure, and nothing fetched from the network."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.web.browser.chrome import (
    Chrome,
    Page,
    SeleniumManagerCalled,
    chrome_options,
    save_failure_artifacts,
    selenium_manager_forbidden,
)
from tests.web.serve import serve

pytestmark = pytest.mark.anyio

LIVE_PAGE = """<!doctype html><title>live</title>
<pre id="out"></pre><p id="state">waiting</p>
<noscript><p id="static">the turn so far: {text}</p></noscript>
<script>
const out = document.getElementById("out");
const source = new EventSource("/events");
source.addEventListener("delta", (e) => {{ out.textContent += e.data; }});
source.addEventListener("done", () => {{
  document.getElementById("state").textContent = "done"; source.close();
}});
</script>"""


class Site:
    """The test's own page: a one-button sign-in and a live stream it feeds."""

    def __init__(self) -> None:
        self.sessions: dict[str, str] = {}
        self.csrf = secrets.token_urlsafe(16)
        self.send, self.receive = anyio.create_memory_object_stream[str](16)
        self.app = Starlette(
            routes=[
                Route("/", self.home),
                Route("/sign-in", self.sign_in, methods=["POST"]),
                Route("/live", self.live),
                Route("/events", self.events),
            ]
        )

    async def home(self, request: Request) -> Response:
        who = self.sessions.get(request.cookies.get("session", ""), "nobody")
        return HTMLResponse(
            f'<!doctype html><p id="who">{who}</p><form method="post" action="/sign-in">'
            f'<input type="hidden" name="csrf" value="{self.csrf}">'
            '<button id="go" type="submit">Sign in</button></form>'
        )

    async def sign_in(self, request: Request) -> Response:
        form = await request.form()
        if form.get("csrf") != self.csrf:
            return Response("forbidden", status_code=403)
        session = secrets.token_urlsafe(16)
        self.sessions[session] = "alice"
        response = RedirectResponse("/", status_code=303)
        response.set_cookie("session", session, httponly=True, samesite="strict")
        return response

    async def live(self, request: Request) -> Response:
        return HTMLResponse(LIVE_PAGE.format(text="(nothing yet)"))

    async def events(self, request: Request) -> Response:
        async def stream() -> AsyncIterator[dict[str, str]]:
            async for piece in self.receive:
                if piece == "":
                    yield {"event": "done", "data": ""}
                    return
                yield {"event": "delta", "data": piece}

        return EventSourceResponse(stream())


async def test_a_form_post_signs_in_and_its_cookie_reaches_the_next_page(page: Page) -> None:
    site = Site()
    async with serve(site.app) as base:
        await page.open(base + "/")
        assert await page.text_of("#who") == "nobody"
        await page.click("#go")
        await page.wait_text("#who", "alice")
        cookie = next(c for c in await page.cookies() if c["name"] == "session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"


async def test_the_cookies_of_one_test_do_not_reach_the_next(page: Page) -> None:
    """Every test serves 127.0.0.1 and cookies ignore ports: the tab is reset between tests."""
    assert await page.cookies() == []
    site = Site()
    async with serve(site.app) as base:
        await page.open(base + "/")
        assert await page.text_of("#who") == "nobody"


async def test_an_event_stream_shows_each_piece_as_it_comes(page: Page) -> None:
    site = Site()
    async with serve(site.app) as base:
        await page.open(base + "/live")
        # Each piece is on the page before the next is sent: it streams, not all at the end.
        shown = ""
        for piece in ("line 1\n", "line 2\n", "line 3\n"):
            await site.send.send(piece)
            shown += piece
            await page.wait_text("#out", shown.strip())
        assert await page.text_of("#state") == "waiting"
        await site.send.send("")
        await page.wait_text("#state", "done")


async def test_with_javascript_off_the_page_shows_what_it_renders_without_scripts(
    page: Page,
) -> None:
    site = Site()
    async with serve(site.app) as base:
        await page.javascript(enabled=False)
        await page.open(base + "/live")
        assert await page.text_of("#static") == "the turn so far: (nothing yet)"
        await page.javascript(enabled=True)
        await page.open(base + "/live")
        assert await page.count("#static") == 0 or await page.text_of("#static") == ""


async def test_what_leaves_loopback_is_caught_and_listed(chrome: Chrome, page: Page) -> None:
    """The pages under test fetch nothing but their own server, and anything that tries to
    leave loopback goes to the recording proxy, not the network."""
    site = Site()
    async with serve(site.app) as base:
        await page.requests()  # only what this test's pages ask
        await page.open(base + "/live")
        await page.element("#out")
        asked = await page.requests()
        assert base + "/live" in asked and base + "/events" in asked
        assert await page.outside_requests() == []
        # A page that does reach out is seen both ways (so the empty list above means something).
        await page.open("http://downloads.example.invalid/driver.zip")
        assert await page.outside_requests() == ["http://downloads.example.invalid/driver.zip"]
    assert any("downloads.example.invalid" in line for line in chrome.outside.seen())


def test_selenium_manager_is_never_asked_for_a_driver() -> None:
    """Without the driver's path Selenium would ask Selenium Manager, which downloads: the
    guard the browser fixture starts under refuses that call."""
    from selenium import webdriver
    from selenium.common.exceptions import NoSuchDriverException
    from selenium.webdriver.chrome.service import Service

    with selenium_manager_forbidden(), pytest.raises(NoSuchDriverException) as caught:
        webdriver.Chrome(options=chrome_options(9), service=Service())
    assert isinstance(caught.value.__cause__, SeleniumManagerCalled)


async def test_a_failure_keeps_the_page_as_a_screenshot(
    chrome: Chrome, page: Page, tmp_path: Path
) -> None:
    site = Site()
    async with serve(site.app) as base:
        await page.open(base + "/")
        await page.text_of("#who")
        saved = await page.call(
            save_failure_artifacts, chrome.driver, "tests/x.py::test_y[a b]", page.visited, tmp_path
        )
    names = sorted(path.name for path in saved)
    assert names == [
        "tests_x.py_test_y_a_b.html",
        "tests_x.py_test_y_a_b.png",
        "tests_x.py_test_y_a_b.urls.txt",
    ]
    assert (tmp_path / "tests_x.py_test_y_a_b.png").read_bytes().startswith(b"\x89PNG\r\n")
    assert 'id="who"' in (tmp_path / "tests_x.py_test_y_a_b.html").read_text()
    assert (tmp_path / "tests_x.py_test_y_a_b.urls.txt").read_text().startswith(base + "/\n")


async def test_a_node_read_after_its_page_was_replaced_is_looked_for_again() -> None:
    """ChromeDriver reports an element read while its page was being replaced as "Node with
    given id does not belong to the document", not as a stale element (a fresh clone's run
    failed on it): the wait looks again, and any other error still ends it."""
    from selenium.common.exceptions import WebDriverException

    page = Page(driver=None)  # type: ignore[arg-type]  # the conditions below never use it
    answers: list[object] = [
        WebDriverException(
            "unknown error: unhandled inspector error: {...Node with given id "
            'does not belong to the document"}'
        ),
        "shown",
    ]

    def condition(_: object) -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await page.wait_for(condition, "the text", seconds=5) == "shown"

    def broken(_: object) -> object:
        raise WebDriverException("unknown error: session deleted")

    with pytest.raises(WebDriverException, match="session deleted"):
        await page.wait_for(broken, "the text", seconds=5)
