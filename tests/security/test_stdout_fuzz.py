"""agy's stdout fuzzed: junk is skipped, the turn's answer is right, the next turn works.

``fake_agy.py`` prints the junk (random bytes, lines over the cap, 100k-deep JSON, unknown and
malformed events, NUL bytes, invalid UTF-8) before a normal answer, or right after ``init``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.harness import running, thread
from tests.faults.console import console_env, start_console, write_config
from tests.faults.fake import FAKE_AGY, fake_agy, received

pytestmark = pytest.mark.anyio

KINDS = ["bytes", "hugeline", "nested", "unknown", "nul", "utf8"]


def said(text: str) -> str:
    return f"You said: Alice (@alice:test): {text}\n"


async def test_junk_during_a_turn_is_skipped_and_the_next_turn_works(tmp_path: Path) -> None:
    """Every kind in turn, in one thread: each turn with junk is answered right, the turn
    after it too, and the same agy carries on through them all."""
    async with running(tmp_path, **fake_agy(tmp_path)) as h:
        pid = None
        for kind in KINDS:
            done = len(h.adapter.finished())
            await h.say(f"FUZZ:{kind} first")
            *_, first = await h.adapter.wait_finished(done + 1)
            assert first.outcome is not None and first.outcome.error is None, (kind, first.outcome)
            assert first.outcome.final_text == said(f"FUZZ:{kind} first")
            assert "".join(first.deltas) == first.outcome.final_text, f"{kind} reached the thread"
            assert not first.tools, kind
            worker = h.bridge.core.threads[thread().key]
            assert worker.proc is not None
            pid = pid or worker.proc.pid

            await h.say("second")
            *_, second = await h.adapter.wait_finished(done + 2)
            assert second.outcome is not None and second.outcome.final_text == said("second")
            assert worker.proc is not None and worker.proc.pid == pid, f"agy changed at {kind}"
            assert not h.adapter.notices, (kind, h.adapter.notices)


async def test_junk_right_after_init_does_not_disturb_the_first_turn(tmp_path: Path) -> None:
    """A thread for each kind, one after the other: each thread's agy starts with that junk
    (the fake reads its ``start`` file when it starts), and its first turn is answered right."""
    settings = fake_agy(tmp_path)
    async with running(tmp_path, **settings) as h:
        for kind in KINDS:
            (tmp_path / "fake" / "start").write_text(f"fuzz:{kind}")
            where = thread(kind)
            await h.say("first", where=where)
            [first] = await h.adapter.wait_finished(1, where)
            assert first.outcome is not None and first.outcome.error is None, kind
            assert first.outcome.final_text == said("first"), kind
            assert "".join(first.deltas) == said("first"), kind


async def test_text_that_cannot_be_encoded_reaches_the_harness_but_not_as_a_crash(
    tmp_path: Path,
) -> None:
    """Lone surrogates are valid JSON escapes but no UTF-8 encoder takes them."""
    async with running(tmp_path, **fake_agy(tmp_path)) as h:
        await h.say("FUZZ:surrogate first")
        [first] = await h.adapter.wait_finished(1)
        assert first.outcome is not None and first.outcome.error is None
        await h.say("second")
        _, second = await h.adapter.wait_finished(2)
        assert second.outcome is not None and second.outcome.final_text == said("second")


async def test_an_answer_that_cannot_be_encoded_is_still_delivered_and_recorded(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, **fake_agy(tmp_path)) as h:
        await h.say("SURROGATE-ANSWER")
        await h.adapter.changes.until(lambda: h.adapter.finished() or h.adapter.notices)
        assert not h.adapter.notices, h.adapter.notices
        [first] = h.adapter.finished()
        assert first.outcome is not None and first.outcome.error is None, first.outcome
        assert "a lone surrogate in the final answer" in first.outcome.final_text
        await h.say("second")
        _, second = await h.adapter.wait_finished(2)
        assert second.outcome is not None and second.outcome.final_text == said("second")
        assert not h.adapter.notices


def test_lone_surrogates_in_a_delta_do_not_break_a_real_adapter(tmp_path: Path) -> None:
    control = tmp_path / "fake"
    control.mkdir()
    config = write_config(tmp_path, command=FAKE_AGY)
    env = console_env(tmp_path, FAKE_AGY_DIR=str(control))
    run = start_console(tmp_path, config, "surrogate", env=env)
    run.send("FUZZ:surrogate first")
    run.wait_output("You said: alice (console:alice): FUZZ:surrogate first")
    run.send("second")
    assert run.finish() == 0, run.err()
    out = run.out()
    assert "You said: alice (console:alice): second" in out
    assert "internal error" not in out, out
    assert "half a pair" in out, out
    assert received(tmp_path) == [
        "alice (console:alice): FUZZ:surrogate first",
        "alice (console:alice): second",
    ]
