from __future__ import annotations

from bridge.simulator.script import Action, parse_script


def test_plain_text_has_no_directives() -> None:
    script = parse_script("hello [not a directive]")
    assert script.calls == 1 and script.actions == [] and script.unknown == []


def test_settings_and_actions_in_order() -> None:
    script = parse_script(
        "[[calls 3]] [[sleep 0.5]] [[tool run_command echo hi]] [[deny]] "
        '[[mcp bridge_chat post {"text": "x"}]] [[reply two\nlines]] [[chunks 4]]'
    )
    assert (script.calls, script.sleep, script.chunks) == (3, 0.5, 4)
    assert script.reply == "two\nlines"
    assert script.actions == [
        Action("tool", ("run_command", "echo hi")),
        Action("deny"),
        Action("mcp", ("bridge_chat", "post", '{"text": "x"}')),
    ]


def test_malformed_and_unknown_directives_are_reported() -> None:
    script = parse_script("[[calls many]] [[frobnicate]] [[tool list_dir /]]")
    assert script.unknown == ["[[calls many]]", "[[frobnicate]]", "[[tool list_dir /]]"]
    assert script.calls == 1
