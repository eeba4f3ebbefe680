"""The threads page: a secret in any column never shown, even once rows are kept between
pages; the list in pages, each person's own."""

from __future__ import annotations

import html
import re
import time
from pathlib import Path
from urllib.parse import unquote

from bridge.core.events import Author, ThreadRef
from bridge.core.scrub import Scrubber
from bridge.web.access import Access, Viewer
from bridge.web.reads import PAGE_SIZE, ThreadLine
from bridge.web.render import Pages
from tests.web.harness import OTHER, ROOM, Web, dm, web_console

SECRET = "xoxb-console-secret-12345"


def _thread(w: Web, ref: ThreadRef, at: float, model: str | None = None) -> None:
    w.run(
        w.h.bridge.store.database.execute,
        "INSERT INTO threads (key, platform, channel, thread, model, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (ref.key, ref.platform, ref.channel, ref.thread, model, at, at),
    )


def _listed(page: str) -> list[str]:
    """The threads a page's table links to, in its order (the thread part of each key)."""
    links = re.findall(r'<tr class="state-[^"]*">\s*<td><a href="/thread\?t=([^"]+)">', page)
    return [ThreadRef.from_key(unquote(html.unescape(link))).thread for link in links]


def test_a_configured_secret_in_any_column_of_the_threads_page_never_appears(
    tmp_path: Path,
) -> None:
    extra = {"slack": {"bot_token": SECRET}, "pricing": {"currency": SECRET}}
    with web_console(tmp_path, **extra) as w:
        db = w.h.bridge.store.database
        now = time.time()
        # The secret in the channel, the thread, the model, the title, the instance (its
        # lease's owner), the currency; the thread's own first message in another.
        named = ThreadRef(platform="test", channel=f"room-{SECRET}", thread=f"t-{SECRET}")
        _thread(w, named, now, model=f"model-{SECRET}")
        w.run(
            db.execute,
            "INSERT INTO thread_titles (thread_key, title, set_by, at) VALUES (?, ?, ?, ?)",
            (named.key, f"title {SECRET}", "@root:test", now),
        )
        w.run(
            db.execute,
            "INSERT INTO leases (thread_key, owner, expires_at) VALUES (?, ?, ?)",
            (named.key, f"{SECRET}#1", now + 3600),
        )
        w.run(
            db.execute,
            "INSERT INTO usage_shares (turn_id, person, person_name, thread_key, platform,"
            " channel, model, at, input_tokens, output_tokens, thinking_tokens,"
            " cache_read_tokens, total_tokens, cost) VALUES (1, ?, ?, ?, ?, ?, ?, ?, 1, 1, 0, 0,"
            " 2, 0.5)",
            ("@root:test", "Root", named.key, "test", named.channel, "m", now),
        )
        unnamed = ThreadRef(platform="test", channel=f"other-{SECRET}", thread="")
        _thread(w, unnamed, now - 1)  # no title, no message: its thread id, else "(room)"
        root = w.sign_in("root")
        for _ in range(2):  # the second from the rows kept since the first
            page = root.get("/")
            assert page.status_code == 200
            assert "room-***" in page.text and "title ***" in page.text
            assert SECRET not in page.text
            # channel, thread (link), model, title, instance, currency, the other channel
            assert page.text.count("***") >= 7, page.text


class Learnt:
    """Secrets read from files: a new one learnt while the console runs."""

    def __init__(self) -> None:
        self.generation = 0
        self._values: tuple[str, ...] = ()

    def learn(self, value: str) -> None:
        self._values = (*self._values, value)
        self.generation += 1

    def values(self) -> tuple[str, ...]:
        return self._values


def test_rows_kept_between_pages_are_made_again_once_a_secret_is_learnt() -> None:
    learnt = Learnt()
    pages = Pages(Scrubber([], files=learnt))
    ref = ThreadRef(platform="test", channel="room", thread="t1")
    line = ThreadLine(ref, "deploy with sk-live-abcdef123", "idle", "m", 0, time.time(), 5, 1.0, "")
    before = pages.thread_rows([line], "USD")[0]
    assert "sk-live-abcdef123" in before  # not a secret yet
    assert pages.thread_rows([line], "USD")[0] is before  # kept
    learnt.learn("sk-live-abcdef123")
    after = pages.thread_rows([line], "USD")[0]
    assert "sk-live-abcdef123" not in after and "deploy with ***" in after
    # And the template's own values (Jinja's finalize) too.
    page = pages.env.from_string("{{ t }}").render(t=line.title)
    assert page == "deploy with ***"


def test_the_list_comes_in_pages_of_each_persons_threads(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        now = time.time()
        for n in range(PAGE_SIZE + 10):
            _thread(w, ThreadRef(platform="test", channel="room", thread=f"r{n:03d}"), now - n)
        for n in range(5):
            _thread(w, ThreadRef(platform="test", channel="other", thread=f"o{n}"), now - n)
        alice = w.sign_in("alice")  # in "room", not in "other"
        first = alice.get("/").text
        assert first.count('<tr class="state-') == PAGE_SIZE
        # The rows' own links: the page also holds a random CSRF token, which may contain "o0".
        assert _listed(first) == [f"r{n:03d}" for n in range(PAGE_SIZE)]
        assert (
            'id="page-older" href="/?page=2"' in first or 'href="/?page=2" id="page-older"' in first
        )
        assert 'id="page-newer"' not in first
        assert f"1–{PAGE_SIZE} of {PAGE_SIZE + 10}" in first
        second = alice.get("/?page=2").text
        assert second.count('<tr class="state-') == 10
        assert _listed(second) == [f"r{n:03d}" for n in range(PAGE_SIZE, PAGE_SIZE + 10)]
        assert 'id="page-newer"' in second and 'id="page-older"' not in second
        # Past the end: the last page; nonsense: the first.
        assert alice.get("/?page=99").text.count('<tr class="state-') == 10
        assert alice.get("/?page=x").text.count('<tr class="state-') == PAGE_SIZE
        carol = w.sign_in("carol")  # in "other" only
        hers = carol.get("/").text
        assert hers.count('<tr class="state-') == 5
        assert _listed(hers) == [f"o{n}" for n in range(5)]
        assert 'id="page-older"' not in hers


async def _both(access: Access, viewer: Viewer, keys: list[str]) -> tuple[list[str], list[str]]:
    each = [k for k in keys if await access.sees(viewer, ThreadRef.from_key(k))]
    return each, await access.seen_keys(viewer, keys)


def test_seen_keys_says_what_sees_says_for_each_thread(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        w.run(w.h.say, "hello [[reply hi]]", where=ROOM, who="alice")
        w.run(w.h.adapter.wait_finished, 1)
        keys = [
            ROOM.key,
            OTHER.key,
            dm("alice").key,
            dm("carol").key,
            ThreadRef(platform="test", channel="room", thread="t-other").key,
            ThreadRef(platform="elsewhere", channel="room", thread="t").key,
        ]
        config, db = w.h.bridge.core.config, w.h.bridge.store.database
        # With a chat that says who its members are, and without one (who wrote in it).
        for members in ({"test": w.adapter}, {}):
            access = Access(config, members, db)
            for who in ("alice", "carol", "root"):
                viewer = access.viewer(Author(id=f"@{who}:test", display_name=who), "test")
                assert viewer is not None
                each, at_once = w.run(_both, access, viewer, keys)
                assert at_once == each, (members, who)
                if who == "alice":  # her room's threads and her DM, or the one she wrote in
                    hers = [ROOM.key, dm("alice").key, keys[4]] if members else [ROOM.key]
                    assert at_once == hers
                if who == "root":
                    assert at_once == keys
