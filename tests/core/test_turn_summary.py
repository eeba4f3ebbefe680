"""What a turn did, for the summary under its answer: the files it wrote and the tokens it
used (agy's usage totals are the conversation's: a turn's share is the difference)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.agy import wire
from bridge.agy.turn import TurnEnd, TurnStatus
from bridge.core.events import TurnOutcome
from bridge.core.outcome import Classified, summarised
from bridge.core.store.rows import TurnState, Usage
from bridge.core.team.usage import turn_delta
from tests.core.scripted import delta, event, world

pytestmark = pytest.mark.anyio


def tool(name: str, state: str, **params: str) -> Any:
    step = {"step_type": "tool", "tool_name": name, "state": state}
    step["tool_info"] = {"name": name, "parameters": params}  # type: ignore[assignment]
    return event({"event": "step_update", "step_update": step})


def done(response: str, total: int) -> Any:
    usage = {"input_tokens": total - 10, "output_tokens": 10, "total_tokens": total}
    return event(
        {"event": "result", "result": {"status": "SUCCESS", "response": response, "usage": usage}}
    )


async def test_a_turn_reports_the_files_it_wrote_and_its_own_tokens(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.say("look around")
        agy = await w.agys.nth(1)
        await agy.wait_turns(1)
        agy.say(tool("view_file", "DONE", AbsolutePath="/w/README.md"), done("read it", 1200))
        await w.adapter.changes.until(
            lambda: bool(w.adapter.replies) and w.adapter.replies[0].outcome is not None
        )

        await w.say("fix the test")
        await agy.wait_turns(2)
        agy.say(
            tool("write_to_file", "ACTIVE", TargetFile="src/app.py"),
            tool("write_to_file", "DONE", TargetFile="src/app.py"),
            tool("replace_file_content", "DONE", TargetFile="tests/test_app.py"),
            tool("write_to_file", "ERROR", TargetFile="ro/file.txt"),
            tool("replace_file_content", "DONE", TargetFile="src/app.py"),
            delta("fixed"),
            done("fixed", 2000),
        )
        await w.adapter.changes.until(
            lambda: len(w.adapter.replies) == 2 and w.adapter.replies[1].outcome is not None
        )

    first, second = (r.outcome for r in w.adapter.replies)
    assert first is not None and second is not None
    assert (first.files_changed, first.tokens) == ([], 1200)
    assert second.files_changed == ["src/app.py", "tests/test_app.py"]
    assert second.tokens == 800


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, (900, 300, 1200)),
        ((900, 300, 1200), (1500, 500, 2000)),
        ((900, 300, 1200), (400, 100, 500)),  # agy counts afresh: all of it is the turn's
        ((900, 300, 1200), (800, 700, 1500)),  # input went down: counted afresh too
    ],
)
def test_the_summary_and_the_usage_ledger_count_a_turns_tokens_alike(
    before: tuple[int, int, int] | None, after: tuple[int, int, int]
) -> None:
    """One computation of a turn's own tokens (bridge/core/tokens.py) for the line under the
    answer and the team's usage ledger (bridge/core/team/usage.py)."""

    def usage(counts: tuple[int, int, int]) -> Usage:
        return Usage(input_tokens=counts[0], output_tokens=counts[1], total_tokens=counts[2])

    previous = usage(before) if before is not None else None
    wire_usage = wire.Usage(input_tokens=after[0], output_tokens=after[1], total_tokens=after[2])
    end = TurnEnd(TurnStatus.DONE, "done", usage=wire_usage)
    plain = Classified(TurnOutcome(final_text="done"), TurnState.DONE)
    shown = summarised(plain, [], previous, end).outcome.tokens
    assert shown == turn_delta(usage(after), previous).total
