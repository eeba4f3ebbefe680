"""A running turn streams into the thread's page over Server-Sent Events; the page shows the
turn so far when loaded (without JavaScript too)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def _events(lines: Iterator[str], until: str = "end") -> Iterator[tuple[str, dict[str, Any]]]:
    kind = ""
    for line in lines:
        if line.startswith("event:"):
            kind = line.partition(":")[2].strip()
        elif line.startswith("data:") and kind:
            yield kind, json.loads(line.partition(":")[2].strip())
            if kind == until:
                return


def test_a_late_watcher_gets_the_turn_so_far_then_tools_and_marks(tmp_path: Path) -> None:
    go = tmp_path / "flags" / "go"
    with web_console(tmp_path) as w:
        w.run(w.h.say, "first [[reply hi]]", where=ROOM, who="alice")
        w.run(w.h.adapter.wait_finished, 1)
        alice = w.sign_in("alice")
        w.run(
            w.h.say,
            f"second [[calls 2]] [[waitfirst {go}]] [[tool run_command echo hi]] "
            "[[reply all done]]",
            where=ROOM,
            who="alice",
        )
        w.run(w.h.adapter.changes.until, lambda: w.h.bridge.core.live.current(ROOM.key))
        with alice.stream("GET", f"/thread/events?t={ROOM.key}") as answer:
            events = _events(answer.iter_lines())
            kind, snapshot = next(events)
            # Subscribed after the turn began: first what it did so far.
            assert kind == "snapshot" and {"text", "tools"} <= set(snapshot)
            w.run(w.h.say, "also this", where=ROOM, who="bob")
            kind, _ = next(events)
            assert kind == "mark"  # bob's message was queued or handed to the turn
            go.touch()
            rest = list(events)
        kinds = [kind for kind, _ in rest]
        assert "tool" in kinds and kinds[-1] == "end"
        tools = [data for kind, data in rest if kind == "tool"]
        assert any("echo hi" in str(tool.get("summary")) for tool in tools), tools
        w.run(w.h.adapter.wait_finished, 2)
        page = alice.get(f"/thread?t={ROOM.key}").text
        assert "also this" in page and "Bob" in page
        assert "all done" in page  # the turn's answer, under Recent turns
