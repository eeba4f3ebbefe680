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


def test_lines_only_the_standard_parser_takes_still_parse() -> None:
    # A lone surrogate: neither the validator's own JSON reader nor orjson takes it.
    line = b'{"event":"step_update","step_update":{"step_type":"agent_response",' + (
        b'"text_delta":"a\\ud800"}}'
    )
    step = wire.parse_event(line)
    assert isinstance(step, wire.StepUpdateEvent) and step.step_update.text_delta == "a\ud800"
    # A known event whose line is broken is a bad line with its reason, read either way.
    for raw in (b'{"event":"result"}', '{"event":"result"}'):
        with pytest.raises(wire.BadLine, match="malformed result event"):
            wire.parse_event(raw)


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


# One null in an optional field must not make the whole line bad: a lost `result` would stall
# the turn until the bridge's own deadline.
_RESULT = {
    "conversation_id": "c",
    "status": "SUCCESS",
    "response": "done",
    "error": None,
    "duration_seconds": 1.5,
    "num_turns": 1,
    "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
    "denied_actions": [{"action": "command", "display_name": "RunCommand"}],
}
_STEP = {
    "conversation_id": "c",
    "step_index": 4,
    "state": "DONE",
    "step_type": "tool",
    "text_delta": "x",
    "tool_name": "run_command",
    "tool_info": {
        "name": "run_command",
        "parameters": {"CommandLine": "ls"},
        "output": "a",
        "error": {"type": "TOOL_ERROR", "message": "m"},
    },
    "duration_seconds": 0.1,
    "usage": {"input_tokens": 1, "output_tokens": 2},
}
_INIT = {
    "conversation_id": "c",
    "init": {"model": "m", "cwd": "/w", "tools": ["run_command"], "permission_mode": "p"},
}


def _with_null(body: dict, path: tuple[str, ...]) -> dict:
    copy = json.loads(json.dumps(body))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = None
    return copy


@pytest.mark.parametrize(
    "path",
    [
        ("response",),
        ("error",),
        ("denied_actions",),
        ("usage",),
        ("num_turns",),
        ("duration_seconds",),
        ("status",),
        ("conversation_id",),
        ("usage", "input_tokens"),
        ("usage", "total_tokens"),
        ("denied_actions", 0),
    ],
)
def test_a_null_in_a_result_keeps_the_result(path: tuple) -> None:
    line = json.dumps({"event": "result", "result": _with_null(_RESULT, path)})
    event = wire.parse_event(line)
    assert isinstance(event, wire.ResultEvent)
    assert event.result.conversation_id in ("c", None)


def test_null_response_and_denials_read_as_empty() -> None:
    body = _with_null(_with_null(_RESULT, ("response",)), ("denied_actions",))
    event = wire.parse_event(json.dumps({"event": "result", "result": body}))
    assert isinstance(event, wire.ResultEvent)
    assert event.result.response == "" and event.result.denied_actions == []
    assert event.result.ok


@pytest.mark.parametrize(
    "path",
    [
        ("step_index",),
        ("state",),
        ("step_type",),
        ("text_delta",),
        ("tool_name",),
        ("tool_info",),
        ("tool_info", "parameters"),
        ("tool_info", "name"),
        ("tool_info", "output"),
        ("tool_info", "error"),
        ("tool_info", "error", "message"),
        ("tool_info", "error", "type"),
        ("usage",),
        ("usage", "output_tokens"),
        ("duration_seconds",),
    ],
)
def test_a_null_in_a_step_keeps_the_step(path: tuple) -> None:
    line = json.dumps({"event": "step_update", "step_update": _with_null(_STEP, path)})
    event = wire.parse_event(line)
    assert isinstance(event, wire.StepUpdateEvent)
    info = event.step_update.tool_info
    if info is not None:
        assert isinstance(info.parameters, dict)
        assert info.error is None or isinstance(info.error.message, str)


@pytest.mark.parametrize(
    "path",
    [("init",), ("init", "tools"), ("init", "model"), ("init", "cwd"), ("conversation_id",)],
)
def test_a_null_in_init_keeps_init(path: tuple) -> None:
    event = wire.parse_event(json.dumps({"event": "init", **_with_null(_INIT, path)}))
    assert isinstance(event, wire.InitEvent)
    assert isinstance(event.init.tools, list)


def test_nulls_are_taken_out_at_every_depth_and_the_word_in_text_is_left() -> None:
    # The nulls go before validation, from a line that has the literal: in a nested model, in a
    # list, in bytes as read from the pipe; the word inside a string is text and stays.
    step = {
        **_STEP,
        "text_delta": "null is not a null",
        "tool_info": {"name": None, "error": {"message": None, "type": None}},
        "usage": {"output_tokens": None, "input_tokens": 3},
    }
    line = json.dumps({"event": "step_update", "step_update": step, "extra": [None, 1]})
    event = wire.parse_event(line.encode())
    assert isinstance(event, wire.StepUpdateEvent)
    update = event.step_update
    assert update.text_delta == "null is not a null"
    assert update.tool_info is not None and update.tool_info.error is not None
    assert update.tool_info.error.message == "" and update.tool_info.name is None
    assert update.usage is not None and update.usage.output_tokens == 0
    assert (update.usage.input_tokens, event.model_extra) == (3, {"extra": [1]})


def test_a_null_in_hook_input_keeps_the_call() -> None:
    hook = wire.HookInput.model_validate_json(
        '{"conversationId":"c","workspacePaths":null,"transcriptPath":null,'
        '"invocationNum":null,"modelName":null}'
    )
    assert hook.conversation_id == "c" and hook.workspace_paths == []
