"""Acting from the console: an approval through the same gate as the chat (agy receives the
decision through the simulator's real hook path), Stop as the chat's `!stop`, and every forged
POST refused (a bad CSRF token, another site, a person who may not, another channel's
thread)."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.testclient import TestClient

from bridge.core.store.rows import ApprovalState, MessageState
from tests.core.approvals.test_gate import workdir
from tests.web.harness import OTHER, ROOM, Web, web_console

GATED = "[[tool run_command touch ran.txt]]"


def _approvals(**settings: object) -> dict[str, object]:
    return {"approvals": {"mode": "ask", "timeout": 60, "approvers": ["@alice:test"], **settings}}


def _waiting(w: Web) -> str:
    """The id of the request waiting in ROOM, once it was asked in the chat."""
    w.run(w.h.adapter.changes.until, lambda: len(w.h.adapter.requests) >= 1)
    [row] = w.run(w.h.bridge.store.waiting_approvals, ROOM.key)
    return row.id


def _decide(client: TestClient, csrf: str, request_id: str, choice: str, key: str = ROOM.key):
    form = {"csrf": csrf, "t": key, "approval": request_id, "choice": choice}
    return client.post("/thread/decide", data=form, follow_redirects=False)


def test_approve_from_the_console_and_agy_runs_the_command(tmp_path: Path) -> None:
    with web_console(tmp_path, **_approvals()) as w:
        w.run(w.h.say, GATED, where=ROOM, who="bob")
        request_id = _waiting(w)
        alice = w.sign_in("alice")
        page = alice.get(f"/thread?t={ROOM.key}").text
        assert "touch ran.txt" in page and 'value="approve"' in page and 'id="stop"' in page
        listed = alice.get("/approvals").text
        assert "touch ran.txt" in listed and 'value="always"' in listed
        csrf = w.csrf(alice)
        assert _decide(alice, csrf, request_id, "approve").status_code == 303
        [reply] = w.run(w.h.adapter.wait_finished, 1)
        # agy was told allow through its PreToolUse hook: the command ran.
        assert (workdir(w.h) / "ran.txt").exists()
        assert w.h.adapter.settled["req-1"].state == "approved"
        assert w.h.adapter.settled["req-1"].by is not None
        assert w.h.adapter.settled["req-1"].by.id == "@alice:test"
        row = w.run(w.h.bridge.store.approval, request_id)
        assert row is not None and row.state is ApprovalState.APPROVED
        # A second answer to the same request changes nothing.
        assert _decide(alice, csrf, request_id, "deny").status_code == 409
        assert reply.outcome is not None


def test_forged_posts_are_refused_and_the_request_still_waits(tmp_path: Path) -> None:
    with web_console(tmp_path, **_approvals()) as w:
        w.run(w.h.say, GATED, where=ROOM, who="alice")
        request_id = _waiting(w)
        alice, bob, carol = w.sign_in("alice"), w.sign_in("bob"), w.sign_in("carol")
        # Bob sees the thread but is no approver: no controls, and his POST is refused.
        page = bob.get(f"/thread?t={ROOM.key}").text
        assert "touch ran.txt" in page
        assert 'value="approve"' not in page and 'id="stop"' not in page
        assert 'value="approve"' not in bob.get("/approvals").text
        assert _decide(bob, w.csrf(bob), request_id, "approve").status_code == 403
        assert (
            bob.post(
                "/thread/stop", data={"csrf": w.csrf(bob), "t": ROOM.key}, follow_redirects=False
            ).status_code
            == 403
        )
        # Carol is not in the channel: she does not see it, and cannot act on it.
        assert "touch ran.txt" not in carol.get("/approvals").text
        assert _decide(carol, w.csrf(carol), request_id, "approve").status_code == 403
        # Alice's own session, but a wrong or missing token, or a POST from another site.
        assert _decide(alice, "forged", request_id, "approve").status_code == 403
        form = {"t": ROOM.key, "approval": request_id, "choice": "approve"}
        assert alice.post("/thread/decide", data=form, follow_redirects=False).status_code == 403
        evil = alice.post(
            "/thread/decide",
            data={**form, "csrf": w.csrf(alice)},
            headers={"Origin": "https://evil.example"},
            follow_redirects=False,
        )
        assert evil.status_code == 403
        # Another channel's thread named with this request: refused.
        other = "test|other|t9"
        assert _decide(alice, w.csrf(alice), request_id, "approve", other).status_code == 403
        # Without a session at all.
        anonymous = w.client("anonymous")
        assert _decide(anonymous, "x", request_id, "approve").status_code == 401
        assert w.h.adapter.settled == {}
        row = w.run(w.h.bridge.store.approval, request_id)
        assert row is not None and row.state is ApprovalState.WAITING
        assert not (workdir(w.h) / "ran.txt").exists()
        # The one legitimate answer still works.
        assert _decide(alice, w.csrf(alice), request_id, "deny").status_code == 303
        w.run(w.h.adapter.changes.until, lambda: "req-1" in w.h.adapter.settled)
        assert w.h.adapter.settled["req-1"].state == "denied"


def test_stop_from_the_console_is_the_chats_stop(tmp_path: Path) -> None:
    go = tmp_path / "flags" / "go"
    with web_console(tmp_path) as w:
        w.run(w.h.say, f"long job [[waitfirst {go}]]", where=ROOM, who="alice")
        w.run(w.h.adapter.changes.until, lambda: w.h.bridge.core.live.current(ROOM.key))
        # Running (agy has the turn): see test_instances_pg.py on a Stop while it takes.
        w.run(w.h.bridge.core.threads[ROOM.key].wait_until, lambda state: state.busy)
        alice = w.sign_in("alice")
        page = alice.get(f"/thread?t={ROOM.key}").text
        assert 'id="stop"' in page and "running" in page
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        answer = alice.post(
            "/thread/stop", data={"csrf": csrf.group(1), "t": ROOM.key}, follow_redirects=False
        )
        assert answer.status_code == 303
        [reply] = w.run(w.h.adapter.wait_finished, 1)
        assert reply.outcome is not None and reply.outcome.interrupted
        # Stored as the chat's command, by alice.
        rows = w.run(
            w.h.bridge.store.database.fetch,
            "SELECT text, state, author_json FROM inbox WHERE text = '!stop'",
        )
        assert [(r["state"], "@alice:test" in r["author_json"]) for r in rows] == [
            (MessageState.COMMAND, True)
        ]


def test_a_request_of_another_channel_named_under_ones_own_thread_is_refused(
    tmp_path: Path,
) -> None:
    """Alice approves in ROOM; Carol's request waits in OTHER, which Alice cannot see. A form
    naming Alice's own thread with Carol's request id must not decide Carol's request."""
    with web_console(tmp_path, **_approvals()) as w:
        w.run(w.h.say, "hello [[reply hi]]", where=ROOM, who="alice")
        w.run(w.h.adapter.wait_finished, 1)
        w.run(w.h.say, GATED, where=OTHER, who="carol")
        w.run(w.h.adapter.changes.until, lambda: len(w.h.adapter.requests) >= 1)
        [row] = w.run(w.h.bridge.store.waiting_approvals, OTHER.key)
        alice = w.sign_in("alice")
        assert "touch ran.txt" not in alice.get("/approvals").text
        for choice in ("approve", "always", "deny"):
            assert _decide(alice, w.csrf(alice), row.id, choice, ROOM.key).status_code == 403
        assert w.h.adapter.settled == {}
        still = w.run(w.h.bridge.store.approval, row.id)
        assert still is not None and still.state is ApprovalState.WAITING


def test_always_from_the_console_adds_the_command_to_the_threads_allow_list(
    tmp_path: Path,
) -> None:
    with web_console(tmp_path, **_approvals()) as w:
        w.run(w.h.say, GATED, where=ROOM, who="alice")
        request_id = _waiting(w)
        alice = w.sign_in("alice")
        assert _decide(alice, w.csrf(alice), request_id, "always").status_code == 303
        w.run(w.h.adapter.wait_finished, 1)
        assert (workdir(w.h) / "ran.txt").exists()
        assert w.h.adapter.settled["req-1"].state == "always"
        assert w.run(w.h.bridge.store.allow_list, ROOM.key)  # asked no more in this thread
