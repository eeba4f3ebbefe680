"""The turn loop against the agy simulator: delivery exactly once, and which way it went."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.core.events import AttachmentRef, Reaction
from tests.core.harness import Harness, running, thread

pytestmark = pytest.mark.anyio


def texts(h: Harness) -> str:
    return "\n".join(r.outcome.final_text for r in h.adapter.finished() if r.outcome)


async def wait_file(path: Path) -> None:
    with anyio.fail_after(20):
        while not path.exists():
            await anyio.sleep(0.02)


async def test_a_message_becomes_a_turn_that_names_its_author(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("hello there", who="alice")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None
        assert reply.outcome.final_text.startswith("You said: Alice (@alice:test): hello there")
        assert "".join(reply.deltas) == reply.outcome.final_text
        assert reply.reply_to == "m1"


async def test_injected_before_the_first_model_call(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        go = h.flag("go")
        await h.say(f"long job [[waitfirst {go}]]")
        await h.adapter.changes.until(lambda: h.adapter.replies)
        late = await h.say("also check the tests", who="bob")
        go.touch()
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None
        assert "Injected: (Message written in the chat while you were working)" in (
            reply.outcome.final_text
        )
        assert texts(h).count("also check the tests") == 1
        assert (late, Reaction.INJECTED) in h.adapter.reactions


async def test_injected_between_two_model_calls(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        started, go = h.flag("started"), h.flag("go")
        await h.say(f"two calls [[calls 2]] [[touch {started}]] [[wait {go}]]")
        await wait_file(started)
        late = await h.say("mid-turn correction", who="bob")
        go.touch()
        [reply] = await h.adapter.wait_finished(1)
        assert "Bob (@bob:test): mid-turn correction" in reply.outcome.final_text  # type: ignore[union-attr]
        # Any turn the injected message caused would come before this one, or carry it.
        await h.say("sentinel")
        _, sentinel = await h.adapter.wait_finished(2)
        assert "mid-turn correction" not in sentinel.outcome.final_text  # type: ignore[union-attr]
        assert len(h.adapter.finished()) == 2, "an injected message must not become a turn"
        assert (late, Reaction.INJECTED) in h.adapter.reactions


async def test_after_the_last_hook_it_waits_for_the_next_turn(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        started, go = h.flag("started"), h.flag("go")
        # The turn runs until the late message is in (a sleep of 0.8 s was a guess at how long
        # the test needs, which a loaded machine outran: the message became a turn of its own).
        await h.say(f"one call [[touch {started}]] [[hold {go}]]")
        await wait_file(started)
        late = await h.say("too late for this turn", who="bob")
        go.touch()
        first, second = await h.adapter.wait_finished(2)
        assert "too late" not in first.outcome.final_text  # type: ignore[union-attr]
        assert second.outcome.final_text.startswith(  # type: ignore[union-attr]
            "You said: Bob (@bob:test): too late for this turn"
        )
        assert texts(h).count("too late for this turn") == 1
        assert (late, Reaction.QUEUED) in h.adapter.reactions
        assert (late, Reaction.INJECTED) not in h.adapter.reactions


async def test_after_the_result_it_is_a_turn_of_its_own(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("first")
        await h.adapter.wait_finished(1)
        await h.say("second")
        _, second = await h.adapter.wait_finished(2)
        assert "second" in second.outcome.final_text  # type: ignore[union-attr]
        assert texts(h).count("second") == 1


async def test_queued_messages_are_batched_into_one_turn(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        started, go = h.flag("started"), h.flag("go")
        await h.say(f"work [[touch {started}]] [[hold {go}]]")
        await wait_file(started)
        await h.say("one", who="bob")
        await h.say("two", who="carol")
        go.touch()  # both wait behind the turn, however slow the machine
        _, second = await h.adapter.wait_finished(2)
        final = second.outcome.final_text  # type: ignore[union-attr]
        assert "Bob (@bob:test): one" in final and "Carol (@carol:test): two" in final
        await h.say("sentinel")
        *_, sentinel = await h.adapter.wait_finished(3)
        assert "one" not in sentinel.outcome.final_text  # type: ignore[union-attr]
        assert len(h.adapter.finished()) == 3


async def test_a_redelivered_event_runs_once(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("only once", event_id="evt-1")
        await h.say("only once", event_id="evt-1")
        await h.adapter.wait_finished(1)
        await h.say("sentinel")
        _, sentinel = await h.adapter.wait_finished(2)
        assert "only once" not in sentinel.outcome.final_text  # type: ignore[union-attr]
        assert len(h.adapter.finished()) == 2
        assert texts(h).count("only once") == 1


async def test_two_threads_never_wait_for_each_other(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        go = h.flag("go")
        await h.say(f"slow [[waitfirst {go}]]", where=thread("a"))
        await h.say("quick", where=thread("b"))
        [done] = await h.adapter.wait_finished(1, thread("b"))
        assert "quick" in done.outcome.final_text  # type: ignore[union-attr]
        assert not h.adapter.finished(thread("a"))
        go.touch()
        await h.adapter.wait_finished(1, thread("a"))


async def test_a_subagents_hook_call_gets_nothing(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("[[subagent]] delegate")
        [reply] = await h.adapter.wait_finished(1)
        assert "Subagent hook: {}" in reply.outcome.final_text  # type: ignore[union-attr]


async def test_attachments_are_saved_or_explained(tmp_path: Path) -> None:
    async with running(tmp_path, max_line_bytes=1 << 20) as h:
        h.adapter.files.update({"ok": b"\x89PNG...", "empty": b"", "big": b"x" * 4096})
        h.bridge.config.bridge.__dict__["max_attachment_bytes"] = 1024
        refs = [
            AttachmentRef(name="../../x", mimetype="image/png", source="ok"),
            AttachmentRef(name="empty.txt", mimetype="text/plain", source="empty"),
            AttachmentRef(name="big.bin", source="big"),
        ]
        await h.say("see attached", attachments=refs)
        [reply] = await h.adapter.wait_finished(1)
        final = reply.outcome.final_text  # type: ignore[union-attr]
        saved = tmp_path / "data" / "sessions"
        [path] = [p for p in saved.rglob("*") if p.is_file() and p.parent.name == "attachments"]
        assert path.name.endswith("-0-x") and path.read_bytes() == b"\x89PNG..."
        assert f"[image attached: {path}" in final
        assert "'empty.txt' could not be saved: the file is empty" in final
        assert "'big.bin' could not be saved: the file is larger than 1024 bytes" in final


async def test_metrics_count_turns_and_injections(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    async with running(tmp_path) as h:
        started, go = h.flag("started"), h.flag("go")
        await h.say(f"[[calls 2]] [[touch {started}]] [[wait {go}]]")
        await wait_file(started)
        await h.say("mid-turn", who="bob")
        go.touch()
        await h.adapter.wait_finished(1)
        body, _ = h.bridge.metrics.render()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
        }
        assert samples[("agy_bridge_turns_total", (("platform", "test"), ("state", "done")))] == 1
        assert samples[("agy_bridge_injections_total", (("platform", "test"),))] == 1
        assert samples[("agy_bridge_live_processes", ())] == 1
