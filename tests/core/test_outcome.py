"""One classification of how a turn ended (its wording is tested in tests/chat/common)."""

from __future__ import annotations

from bridge.agy.turn import TurnEnd, TurnStatus
from bridge.core.outcome import classify
from bridge.core.store.rows import TurnState


def no_scrub(text: str) -> str:
    return text


def test_interruption_is_never_shown_as_an_error() -> None:
    end = TurnEnd(TurnStatus.INTERRUPTED, "partial")
    result = classify(end, scrub=no_scrub, stopped_by="Bob")
    assert result.state is TurnState.INTERRUPTED
    assert result.outcome.error is None and result.outcome.interrupted
    assert result.outcome.notes == ["Stopped by Bob."]


def test_our_deadline_says_how_long_it_waited() -> None:
    result = classify(TurnEnd(TurnStatus.INTERRUPTED, ""), scrub=no_scrub, deadline_minutes=0.5)
    assert result.state is TurnState.INTERRUPTED
    assert result.outcome.error == "the turn ran longer than 0.5 minutes and was stopped"


def test_errors_and_exits_are_errors_in_agys_words_scrubbed() -> None:
    result = classify(
        TurnEnd(TurnStatus.ERROR, "", error="quota for xoxb-secret reached"),
        scrub=lambda t: t.replace("xoxb-secret", "[redacted]"),
    )
    assert result.state is TurnState.ERROR
    assert result.outcome.error == "quota for [redacted] reached"
    exited = classify(TurnEnd(TurnStatus.EXITED, "half", error="agy stopped"), scrub=no_scrub)
    assert exited.state is TurnState.ERROR and exited.outcome.final_text == "half"
    done = classify(TurnEnd(TurnStatus.DONE, "ok", denied=("RunCommand",)), scrub=no_scrub)
    assert done.state is TurnState.DONE and done.outcome.denied == ["RunCommand"]
