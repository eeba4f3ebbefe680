"""Every page of the console, and who sees what: the chat's own rules."""

from __future__ import annotations

from pathlib import Path

from bridge.core.events import ThreadRef
from tests.pg import Postgres
from tests.web.harness import OTHER, ROOM, Web, web_console
from tests.web.page import read

SECRET = "xoxb-console-secret-12345"


def _two_threads(w: Web) -> None:
    w.run(w.h.say, f"hello [[reply hi]] {SECRET}", where=ROOM, who="alice")
    w.run(w.h.say, "elsewhere [[reply there]]", where=OTHER, who="carol")
    w.run(w.h.adapter.wait_finished, 2)


def _link(ref: ThreadRef) -> str:
    """The thread's link on the threads page."""
    return f"t={ref.key.replace('|', '%7C')}"


def test_every_page_for_an_admin(tmp_path: Path) -> None:
    extra = {"slack": {"bot_token": SECRET}}
    with web_console(tmp_path, **extra) as w:
        _two_threads(w)
        root = w.sign_in("root")
        pages = {
            "/": ["room", "other", "idle"],
            f"/thread?t={ROOM.key}": ["hello", "Recent turns", 'id="live"'],
            "/approvals": ["Nothing waits"],
            "/usage": ["<svg", "Tokens per day by channel", "Tokens per day by person"],
            "/audit": ["Hash chain: intact"],
            "/schedules": ["No schedule"],
            "/instances": ["Store: answers", "Agent slots", "Not isolated"],
        }
        for path, expected in pages.items():
            page = root.get(path)
            assert page.status_code == 200, (path, page.text[:300])
            for text in expected:
                assert text in page.text, (path, text)
            # The scrubber on everything shown: the bot token never reaches a page.
            assert SECRET not in page.text, path
            assert "<script>" not in page.text and " style=" not in page.text, path


def test_a_member_sees_their_channels_only_and_no_admin_pages(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        _two_threads(w)
        carol = w.sign_in("carol")
        threads = carol.get("/").text
        assert read(threads).thread_keys() == [OTHER.key]
        assert carol.get(f"/thread?t={ROOM.key}").status_code == 404
        assert carol.get(f"/thread?t={OTHER.key}").status_code == 200
        assert carol.get("/audit").status_code == 403
        assert carol.get("/instances").status_code == 403
        assert 'id="nav-audit"' not in threads
        alice = w.sign_in("alice")
        assert alice.get(f"/thread?t={OTHER.key}").status_code == 404
        # The other thread's link and first words, not a bare "t9": the page also carries a
        # random form token, which may contain any two characters.
        page = alice.get("/").text
        assert _link(OTHER) not in page and "elsewhere" not in page and _link(ROOM) in page
        # Membership is asked of the chat, then kept a while (not once per thread per page).
        calls = w.adapter.member_calls
        alice.get("/")
        assert w.adapter.member_calls == calls


def test_usage_is_drawn_per_day_by_channel_and_person(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        db = w.h.bridge.store.database
        shares = [("room", "alice", 1000), ("room", "bob", 2000), ("other", "zed", 7000)]
        for i, (channel, person, tokens) in enumerate(shares):
            w.run(
                db.execute,
                "INSERT INTO usage_shares (turn_id, person, person_name, thread_key, platform,"
                " channel, model, at, input_tokens, output_tokens, thinking_tokens,"
                " cache_read_tokens, total_tokens, cost) VALUES (?, ?, ?, ?, 'test', ?, 'm',"
                " strftime('%s','now') - ?, 1, 1, 0, 0, ?, 0.5)",
                (
                    i + 1,
                    f"@{person}:test",
                    person.title(),
                    f"test|{channel}|t",
                    channel,
                    i * 86400,
                    tokens,
                ),
            )
        root = w.sign_in("root")
        page = root.get("/usage").text
        assert page.count("<svg") == 2
        assert "Alice" in page and "Bob" in page and "Zed" in page
        assert "7,000" in page and "3,000" in page  # each channel's total
        # Alice (a member of room, not of other) sees room's usage only.
        alice = read(w.sign_in("alice").get("/usage").text)
        assert [row[:3] for row in alice.tables["usage-totals"][1:]] == [
            ["channel", "room", "3,000"],
            ["person", "Bob", "2,000"],
            ["person", "Alice", "1,000"],
        ]
        assert "Zed" not in alice.text and "7,000" not in alice.text  # in no chart either


def test_every_page_reads_postgresql_too(tmp_path: Path, postgres: Postgres) -> None:
    with web_console(tmp_path, store={"url": postgres.new_database(), "instance": "one"}) as w:
        _two_threads(w)
        root = w.sign_in("root")
        for path in (
            "/",
            f"/thread?t={ROOM.key}",
            "/approvals",
            "/usage",
            "/audit",
            "/schedules",
            "/instances",
        ):
            page = root.get(path)
            assert page.status_code == 200, (path, page.text[:300])
        # The instance holding each thread's lease, in the threads table's last column.
        threads = read(root.get("/").text).tables["threads"]
        assert threads[0][-1] == "Instance" and {row[-1] for row in threads[1:]} == {"one"}
        assert "shared by several instances" in root.get("/instances").text
