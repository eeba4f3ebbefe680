"""Signing in through the chat: `!web` in a DM gives a one-time link; its GET shows a button
and uses nothing (a link preview signs nobody in); its POST opens a session once."""

from __future__ import annotations

from pathlib import Path

from bridge.core.commands.web import ASK_IN_A_DM, NOT_ENABLED
from tests.web.harness import BASE, ROOM, dm, web_console
from tests.web.page import read


def test_web_outside_a_dm_asks_for_a_dm_and_sends_no_link(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        w.run(w.h.say, "!web", where=ROOM, who="alice")
        assert (ROOM.key, ASK_IN_A_DM) in w.adapter.notices
        assert w.adapter.quiet == []


def test_a_link_signs_in_once_and_shows_the_threads(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        w.run(w.h.say, "hello [[reply hi]]", where=ROOM, who="alice")
        w.run(w.h.adapter.wait_finished, 1)
        assert w.client("nobody").get("/").status_code == 401
        alice = w.sign_in("alice")
        page = alice.get("/")
        assert page.status_code == 200
        shown = read(page.text)
        assert "Alice (@alice:test)" in shown.text  # who is signed in
        assert shown.thread_keys() == [ROOM.key]
        cookie = alice.cookies.get("agy_console")
        assert cookie
        # The link is used: nobody else (nor alice again) signs in with it.
        path = w.link("alice")
        assert w.client("second").post(path, follow_redirects=False).status_code == 303
        assert w.client("third").post(path, follow_redirects=False).status_code == 410
        assert w.client("third").get(path).status_code == 410
        assert w.client("third").get("/").status_code == 401


def test_the_get_uses_nothing_so_a_preview_bot_signs_nobody_in(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        path = w.link("alice")
        bot = w.client("preview-bot")
        for _ in range(3):
            answer = bot.get(path, headers={"User-Agent": "Slackbot-LinkExpanding 1.0"})
            assert answer.status_code == 200 and 'id="signin"' in answer.text
            assert "set-cookie" not in answer.headers
        assert bot.get("/").status_code == 401
        # The person still signs in with it afterwards.
        person = w.client("alice")
        assert person.post(path, follow_redirects=False).status_code == 303
        assert person.get("/").status_code == 200


def test_an_expired_or_forged_link_signs_nobody_in(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        path = w.link("alice")
        w.run(w.h.bridge.store.database.execute, "UPDATE web_links SET expires_at = 0")
        client = w.client("late")
        assert client.get(path).status_code == 410
        assert client.post(path, follow_redirects=False).status_code == 410
        assert client.get("/").status_code == 401
        fresh = w.link("alice")
        token, _, signature = fresh.rpartition("/")[2].partition(".")
        forged = f"/signin/{token}.{'0' * len(signature)}"
        assert client.post(forged, follow_redirects=False).status_code == 410
        made_up = "/signin/" + "A" * 43 + "." + signature
        assert client.post(made_up, follow_redirects=False).status_code == 410
        assert client.get("/").status_code == 401


def test_a_sign_in_from_another_site_is_refused(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        path = w.link("alice")
        client = w.client("victim")
        answer = client.post(
            path, headers={"Origin": "https://evil.example"}, follow_redirects=False
        )
        assert answer.status_code == 403
        assert client.get("/").status_code == 401


def test_the_cookie_and_the_headers(tmp_path: Path) -> None:
    with web_console(tmp_path, web={"public_url": "https://console.example"}) as w:
        path = w.link("alice")
        client = w.client("alice")
        page = client.get(path)
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert page.headers["referrer-policy"] == "same-origin"
        answer = client.post(
            path, headers={"Origin": "https://console.example"}, follow_redirects=False
        )
        assert answer.status_code == 303
        cookie = answer.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "secure" in cookie
    assert BASE.startswith("http://")


def test_the_trusted_header_signs_in_only_when_configured(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        client = w.client("proxy")
        assert client.get("/", headers={"X-Forwarded-User": "@root:test"}).status_code == 401
    with web_console(
        tmp_path / "b", web={"trusted_header": "X-Forwarded-User", "trusted_platform": "test"}
    ) as w:
        client = w.client("proxy")
        page = client.get("/", headers={"X-Forwarded-User": "@root:test"})
        assert page.status_code == 200 and "@root:test" in page.text
        # Another person behind the proxy on the same browser: their own session.
        page = client.get("/", headers={"X-Forwarded-User": "@alice:test"})
        assert page.status_code == 200 and "@alice:test" in page.text
        assert 'id="nav-audit"' not in page.text
        # A client that keeps no cookie gets the same session each time (not one per request).
        bare = w.client("curl")  # (an app of its own: its first request opens a session)
        assert bare.get("/", headers={"X-Forwarded-User": "@root:test"}).status_code == 200
        before = w.run(w.h.bridge.store.database.fetch, "SELECT COUNT(*) AS n FROM web_sessions")
        for _ in range(3):
            bare.cookies.clear()
            assert bare.get("/", headers={"X-Forwarded-User": "@root:test"}).status_code == 200
        after = w.run(w.h.bridge.store.database.fetch, "SELECT COUNT(*) AS n FROM web_sessions")
        assert after[0]["n"] == before[0]["n"]
        # Each session the header opened is in the audit trail, as a link's sign-in is: once
        # per session, with how the person was known.
        records = w.run(w.h.bridge.core.team.audit.records)
        signins = [(r.kind, r.person, r.detail.get("via")) for r in records]
        signins = [s for s in signins if s[0] == "console_signin"]
        assert signins == [
            ("console_signin", "@root:test", "trusted header"),
            ("console_signin", "@alice:test", "trusted header"),
            ("console_signin", "@root:test", "trusted header"),  # the cookieless client's one
        ], signins


def test_signing_out_ends_the_session_and_the_trail_has_the_sign_in(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        alice = w.sign_in("alice")
        records = w.run(w.h.bridge.core.team.audit.records)
        assert [(r.kind, r.person) for r in records if r.kind == "console_signin"] == [
            ("console_signin", "@alice:test")
        ]
        # Sign-out is a form like any other: no token, no sign-out.
        assert alice.post("/signout", follow_redirects=False).status_code == 403
        assert alice.get("/").status_code == 200
        cookie = alice.cookies.get("agy_console")
        answer = alice.post("/signout", data={"csrf": w.csrf(alice)}, follow_redirects=False)
        assert answer.status_code == 303
        assert alice.get("/").status_code == 401
        # The old cookie is worth nothing now, whoever holds it.
        thief = w.client("thief")
        thief.cookies.set("agy_console", cookie or "")
        assert thief.get("/").status_code == 401


def test_web_says_so_when_the_console_is_off(tmp_path: Path) -> None:
    with web_console(tmp_path, web={"enabled": False}) as w:
        w.run(w.h.say, "!web", where=dm("alice"), who="alice")
        assert (dm("alice").key, NOT_ENABLED) in w.adapter.notices
        assert w.adapter.quiet == []
