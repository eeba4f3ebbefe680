from __future__ import annotations

import json

import pytest

from bridge.agy import wire


def test_init_with_id_beside_or_inside() -> None:
    beside = wire.parse_event('{"event":"init","conversation_id":"c1","init":{"cwd":"/w"}}')
    inside = wire.parse_event('{"event":"init","init":{"conversation_id":"c2","model":"m"}}')
    assert isinstance(beside, wire.InitEvent) and beside.conversation == "c1"
    assert isinstance(inside, wire.InitEvent) and inside.conversation == "c2"
    assert inside.init.model == "m"


def test_unknown_events_steps_and_fields_are_kept() -> None:
    event = wire.parse_event('{"event":"telemetry","x":1}')
    assert isinstance(event, wire.UnknownEvent) and event.event == "telemetry"
    step = wire.parse_event(
        '{"event":"step_update","step_update":{"step_index":3,"state":"DONE",'
        '"step_type":"sim_future","new_field":{"a":1}}}'
    )
    assert isinstance(step, wire.StepUpdateEvent)
    assert step.step_update.step_type == "sim_future"
    assert step.step_update.model_extra == {"new_field": {"a": 1}}


def test_user_input_step_without_text() -> None:
    step = wire.parse_event(
        '{"event":"step_update","step_update":{"conversation_id":"c","step_index":0,'
        '"state":"DONE","step_type":"user_input"}}'
    )
    assert isinstance(step, wire.StepUpdateEvent) and step.step_update.text_delta is None


def test_result_error_and_denials() -> None:
    event = wire.parse_event(
        '{"event":"result","result":{"conversation_id":"","status":"ERROR","response":"",'
        '"error":"Individual quota reached","num_turns":0,'
        '"denied_actions":[{"action":"command","display_name":"RunCommand"}]}}'
    )
    assert isinstance(event, wire.ResultEvent)
    assert not event.result.ok and event.result.error == "Individual quota reached"
    assert event.result.denied_actions[0].display_name == "RunCommand"


def test_permission_denial_step() -> None:
    event = wire.parse_event(
        json.dumps(
            {
                "event": "step_update",
                "step_update": {
                    "state": "ERROR",
                    "step_type": "tool",
                    "tool_name": "run_command",
                    "tool_info": {
                        "name": "run_command",
                        "error": {"type": "TOOL_ERROR", "message": "permission check failed: x"},
                    },
                },
            }
        )
    )
    assert isinstance(event, wire.StepUpdateEvent) and event.step_update.is_permission_denial


@pytest.mark.parametrize(
    "line",
    ["not json", "[1,2]", '{"no_event":1}', '{"event":"result","result":"oops"}', "[" * 5000],
)
def test_bad_lines_raise_badline(line: str) -> None:
    with pytest.raises(wire.BadLine):
        wire.parse_event(line)


def test_user_line_is_text_blocks_and_one_line() -> None:
    line = wire.user_line(["Alice: hi\nthere \u2028 x", "second"])
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    data = json.loads(line)
    assert data["event"] == "user"
    assert [b["type"] for b in data["message"]["content"]] == ["text", "text"]
    assert data["message"]["content"][0]["text"] == "Alice: hi\nthere \u2028 x"


def test_hook_reply_is_exactly_what_agy_accepts() -> None:
    assert wire.EMPTY_HOOK_REPLY.to_json() == b"{}"
    reply = wire.HookReply(inject_steps=[wire.InjectedStep(user_message="hi")])
    assert json.loads(reply.to_json()) == {"injectSteps": [{"userMessage": "hi"}]}


def test_hook_input_is_camel_case_and_tolerant() -> None:
    data = wire.HookInput.model_validate(
        {"conversationId": "c", "invocationNum": 2, "initialNumSteps": 5, "future": True}
    )
    assert (data.conversation_id, data.invocation_num, data.initial_num_steps) == ("c", 2, 5)


def test_hooks_file_is_a_named_bundle() -> None:
    handler = wire.HookHandler(command="curl x", timeout=10)
    data = wire.hooks_file("bridge", {"PreInvocation": handler})
    assert data == {
        "bridge": {"PreInvocation": [{"type": "command", "command": "curl x", "timeout": 10}]}
    }
    with pytest.raises(ValueError):
        wire.hooks_file("PreInvocation", {"PreInvocation": handler})
    with pytest.raises(ValueError):
        wire.hooks_file("enabled", {})


def test_mcp_config_uses_server_url() -> None:
    assert wire.mcp_config_file({"chat": "http://127.0.0.1:1/t/mcp/chat"}) == {
        "mcpServers": {"chat": {"serverUrl": "http://127.0.0.1:1/t/mcp/chat"}}
    }
