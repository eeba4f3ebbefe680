"""A running turn streams into the thread's page over Server-Sent Events; the page shows the
turn so far when loaded (without JavaScript too)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.web.harness import ROOM, web_console


def test_a_streamed_delta_reaches_the_page(tmp_path: Path) -> None:
    go = tmp_path / "flags" / "go"
    with web_console(tmp_path) as w:
        w.run(w.h.say, "first [[reply hi]]", where=ROOM, who="alice")
        w.run(w.h.adapter.wait_finished, 1)
        alice = w.sign_in("alice")
        with alice.stream("GET", f"/thread/events?t={ROOM.key}") as events:
            assert events.status_code == 200
            assert events.headers["content-type"].startswith("text/event-stream")
            w.run(
                w.h.say,
                f"second [[waitfirst {go}]] [[reply streamed words]]",
                where=ROOM,
                who="alice",
            )
            seen: list[tuple[str, str]] = []
            kind = ""
            lines = events.iter_lines()
            for line in lines:
                if line.startswith("event:"):
                    kind = line.partition(":")[2].strip()
                    if kind == "turn":
                        # The turn is open: the page shows it running, then agy goes on.
                        page = alice.get(f"/thread?t={ROOM.key}").text
                        assert "started" in page and "running" in page
                        go.touch()
                elif line.startswith("data:") and kind:
                    seen.append((kind, line.partition(":")[2].strip()))
                    if kind == "end":
                        break
        deltas = "".join(json.loads(data)["text"] for kind, data in seen if kind == "delta")
        assert "streamed words" in deltas
        assert [kind for kind, _ in seen][-1] == "end"
        w.run(w.h.adapter.wait_finished, 2)


def test_a_thread_one_may_not_see_streams_nothing(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        w.run(w.h.say, "first [[reply hi]]", where=ROOM, who="alice")
        w.run(w.h.adapter.wait_finished, 1)
        carol = w.sign_in("carol")
        assert carol.get(f"/thread/events?t={ROOM.key}").status_code == 404
        assert w.client("anonymous").get(f"/thread/events?t={ROOM.key}").status_code == 401
