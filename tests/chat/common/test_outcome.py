"""One wording of how a turn ended for every adapter."""

from __future__ import annotations

from bridge.chat.common.outcome import code_span, outcome_lines, render_outcome
from bridge.core.events import TurnOutcome


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


def test_an_interruption_is_never_worded_as_agys_error() -> None:
    stopped = TurnOutcome(final_text="partial", interrupted=True, notes=["Stopped by Bob."])
    assert outcome_lines(stopped) == ["⏹️ _Interrupted._", "ℹ️ Stopped by Bob."]
    assert "agy:" not in render_outcome(stopped, "")


def test_a_code_span_outlasts_the_backticks_it_holds() -> None:
    assert code_span("ls") == "`ls`"
    assert code_span("a``b") == "```a``b```"
    assert code_span("`x") == "`` `x ``"
