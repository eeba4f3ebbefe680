"""One classification of how a turn ended, and one renderer for every adapter."""

from __future__ import annotations

from bridge.agy.turn import TurnEnd, TurnStatus
from bridge.core.events import TurnOutcome
from bridge.core.outcome import classify, render_outcome
from bridge.core.store_model import TurnState


def no_scrub(text: str) -> str:
    return text


def test_render_outcome_lists_the_answer_then_what_went_wrong() -> None:
    assert render_outcome(TurnOutcome(final_text="Done."), "Do") == "Done."
    assert render_outcome(TurnOutcome(), "streamed only") == "streamed only"
    assert render_outcome(TurnOutcome(), "") == "_(no answer)_"
    text = render_outcome(
        TurnOutcome(
            final_text="Partial",
            interrupted=True,
            denied=["command", "ed`it"],
            notes=["resumed from a new process"],
        ),
        "",
    )
    assert text == (
        "Partial\n\n⏹️ _Interrupted._\n\n🚫 Not allowed: `command`, ``ed`it``"
        "\n\nℹ️ resumed from a new process"
    )
    quota = render_outcome(TurnOutcome(error="Individual quota reached"), "")
    assert quota == "⚠️ agy: Individual quota reached"


def test_interruption_is_never_shown_as_an_error() -> None:
    end = TurnEnd(TurnStatus.INTERRUPTED, "partial")
    result = classify(end, scrub=no_scrub, stopped_by="Bob")
    assert result.state is TurnState.INTERRUPTED
    assert result.outcome.error is None and result.outcome.interrupted
    assert result.outcome.notes == ["Stopped by Bob."]
    assert "agy:" not in render_outcome(result.outcome, "")


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
