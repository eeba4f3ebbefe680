"""The sans-IO turn reader: agy's events in, what the core acts on out."""

from __future__ import annotations

import json

from bridge.agy import wire
from bridge.agy.process import ProcessExit
from bridge.agy.turn import (
    ERROR_EXIT_WAIT,
    INTERRUPT_GRACE,
    TextDelta,
    ToolUpdate,
    TurnEnd,
    TurnReader,
    TurnStatus,
)

CONV = "conv-1"


def step(**fields: object) -> wire.AgyEvent:
    return wire.parse_event(json.dumps({"event": "step_update", "step_update": fields}))


def result(**fields: object) -> wire.AgyEvent:
    return wire.parse_event(json.dumps({"event": "result", "result": fields}))


def test_deltas_stream_and_the_result_gives_the_final_text() -> None:
    reader = TurnReader(CONV)
    assert reader.feed(step(step_type="user_input", state="DONE")) is None
    assert reader.acknowledged
    assert reader.feed(step(step_type="agent_response", text_delta="Hel")) == TextDelta("Hel")
    assert reader.feed(step(step_type="agent_response", text_delta="lo")) == TextDelta("lo")
    usage = {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    end = reader.feed(result(status="SUCCESS", response="Hello!", usage=usage))
    assert isinstance(end, TurnEnd)
    assert (end.status, end.final_text, end.error) == (TurnStatus.DONE, "Hello!", None)
    assert end.usage is not None and end.usage.total_tokens == 7
    assert end.exit_wait == 0
    # Nothing after the end belongs to this turn.
    assert reader.feed(step(step_type="agent_response", text_delta="late")) is None


def test_an_empty_response_falls_back_to_what_streamed() -> None:
    reader = TurnReader(CONV)
    reader.feed(step(step_type="agent_response", text_delta="only streamed"))
    end = reader.feed(result(status="SUCCESS", response=""))
    assert isinstance(end, TurnEnd) and end.final_text == "only streamed"


def test_a_subagents_steps_are_not_the_turns() -> None:
    reader = TurnReader(CONV)
    other = step(step_type="agent_response", text_delta="sub", conversation_id="conv-sub")
    assert reader.feed(other) is None
    own = step(step_type="agent_response", text_delta="mine", conversation_id=CONV)
    assert reader.feed(own) == TextDelta("mine")


def test_tools_get_a_one_line_summary_and_denials_are_collected() -> None:
    reader = TurnReader(CONV)
    long_command = "echo " + "x" * 300
    update = reader.feed(
        step(
            step_type="tool",
            tool_name="run_command",
            state="ACTIVE",
            tool_info={"parameters": {"CommandLine": long_command}},
        )
    )
    assert isinstance(update, ToolUpdate)
    assert update.summary.startswith("echo xxx") and len(update.summary) == 120
    assert not update.denied
    mcp = reader.feed(
        step(
            step_type="tool",
            tool_name="mcp",
            tool_info={"parameters": {"ServerName": "bridge_chat", "ToolName": "post_message"}},
        )
    )
    assert isinstance(mcp, ToolUpdate) and mcp.summary == "bridge_chat/post_message"
    refused = reader.feed(
        step(
            step_type="tool",
            tool_name="write_to_file",
            state="ERROR",
            tool_info={"error": {"message": "Tool call denied by pre-tool hook: not here"}},
        )
    )
    assert isinstance(refused, ToolUpdate) and refused.denied
    assert refused.error == "Tool call denied by pre-tool hook: not here"
    end = reader.feed(result(status="SUCCESS", response="ok"))
    assert isinstance(end, TurnEnd) and end.denied == ("write_to_file",)


def test_agys_denied_actions_name_the_refusals_when_present() -> None:
    reader = TurnReader(CONV)
    end = reader.feed(
        result(status="SUCCESS", denied_actions=[{"action": "command", "display_name": "Run"}])
    )
    assert isinstance(end, TurnEnd) and end.denied == ("Run",)


def test_interrupt_words_mean_interrupted_not_failed() -> None:
    for words in ("interrupted", "context canceled", "Interrupted"):
        end = TurnReader(CONV).feed(result(status="ERROR", error=words))
        assert isinstance(end, TurnEnd)
        assert (end.status, end.error) == (TurnStatus.INTERRUPTED, None)
        assert end.exit_wait == INTERRUPT_GRACE


def test_errors_keep_agys_words_and_wait_for_agy_to_leave() -> None:
    end = TurnReader(CONV).feed(result(status="ERROR", error="Individual quota reached"))
    assert isinstance(end, TurnEnd)
    assert (end.status, end.error) == (TurnStatus.ERROR, "Individual quota reached")
    assert end.exit_wait == ERROR_EXIT_WAIT
    silent = TurnReader(CONV).feed(result(status="ERROR"))
    assert isinstance(silent, TurnEnd) and silent.error


def test_after_our_sigint_any_error_or_exit_is_an_interruption() -> None:
    reader = TurnReader(CONV)
    reader.interrupt_sent()
    end = reader.feed(result(status="ERROR", error="something else"))
    assert isinstance(end, TurnEnd) and end.status is TurnStatus.INTERRUPTED
    gone = TurnReader(CONV)
    gone.feed(step(step_type="agent_response", text_delta="half"))
    gone.interrupt_sent()
    end = gone.feed(ProcessExit(code=1, stderr_tail=""))
    assert isinstance(end, TurnEnd)
    assert (end.status, end.final_text) == (TurnStatus.INTERRUPTED, "half")


def test_an_exit_without_a_result_says_how_agy_ended() -> None:
    reader = TurnReader(CONV)
    end = reader.feed(ProcessExit(code=2, stderr_tail="panic: boom"))
    assert isinstance(end, TurnEnd) and end.status is TurnStatus.EXITED
    assert end.error is not None and "exit code 2" in end.error and "panic: boom" in end.error
    assert not reader.acknowledged  # agy never read the turn


def test_a_batch_reads_as_its_events_with_the_deltas_in_a_row_joined() -> None:
    reader = TurnReader(CONV)
    tool = {"step_type": "tool", "tool_name": "run_command", "state": "ACTIVE"}
    events = reader.read(
        [
            step(step_type="user_input", state="DONE"),
            step(step_type="agent_response", text_delta="Hel"),
            step(step_type="agent_response", text_delta="lo"),
            step(step_type="agent_response", text_delta="x", conversation_id="subagent"),
            step(**tool),
            step(step_type="agent_response", text_delta="!"),
            result(status="SUCCESS"),
            step(step_type="agent_response", text_delta="late"),
        ]
    )
    assert [type(e) for e in events] == [TextDelta, ToolUpdate, TextDelta, TurnEnd]
    assert (events[0], events[2]) == (TextDelta("Hello"), TextDelta("!"))
    end = events[-1]
    assert isinstance(end, TurnEnd) and end.final_text == "Hello!"
    assert reader.read([step(step_type="agent_response", text_delta="later")]) == []


def test_a_batch_read_and_the_same_events_fed_one_by_one_agree() -> None:
    outputs = [
        step(step_type="agent_response", text_delta=f"{n} ", conversation_id=CONV) for n in range(5)
    ] + [ProcessExit(1, "gone")]
    one_by_one = TurnReader(CONV)
    fed = [e for e in map(one_by_one.feed, outputs) if e is not None]
    read = TurnReader(CONV).read(outputs)
    assert isinstance(read[0], TextDelta)
    assert "".join(e.text for e in fed if isinstance(e, TextDelta)) == read[0].text
    assert fed[-1] == read[-1] and len(read) == 2
