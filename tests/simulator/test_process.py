"""One simulator process: start, turns, resume, input errors, signals, timeouts."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simulator.driver import SimFactory, make_plugin, result_of, steps


@pytest.mark.parametrize("layout", ["beside", "inside"])
def test_init_layouts(sims: SimFactory, layout: str) -> None:
    sim = sims.start("--model", "gemini-3.8-flash-low", AGY_SIM_INIT_LAYOUT=layout)
    init = sim.next_event()
    assert init["event"] == "init"
    body = init["init"]
    conversation = (
        init.get("conversation_id") if layout == "beside" else body.get("conversation_id")
    )
    assert isinstance(conversation, str) and len(conversation) == 36
    assert ("conversation_id" in init) == (layout == "beside")
    assert body["model"] == "gemini-3.8-flash-low"
    assert body["cwd"] == str(sims.cwd)
    assert {"run_command", "view_file", "call_mcp_tool"} <= set(body["tools"])
    assert body["permission_mode"] == "request-review"
    sim.close_stdin()
    assert sim.wait() == 0


def test_init_without_model_and_permission_modes(sims: SimFactory) -> None:
    init = sims.start("--dangerously-skip-permissions").next_event()["init"]
    assert "model" not in init
    assert init["permission_mode"] == "always-proceed"
    assert sims.start("--mode", "plan").next_event()["init"]["permission_mode"] == "plan"


def test_two_turns_in_one_process(sims: SimFactory) -> None:
    sim = sims.start()
    conversation = sim.next_event()["conversation_id"]
    sim.send("first line\nsecond line")
    first = sim.turn()
    sim.send("again")
    second = sim.turn()
    one, two = result_of(first), result_of(second)
    assert one["status"] == "SUCCESS" and "error" not in one
    assert one["response"] == "You said: first line\nsecond line\n"
    assert two["response"] == "You said: again\n"
    assert (one["num_turns"], two["num_turns"]) == (1, 2)
    assert two["usage"]["input_tokens"] > one["usage"]["input_tokens"]
    total = two["usage"]
    assert total["total_tokens"] == total["input_tokens"] + total["output_tokens"]
    indexes = [s["step_index"] for s in steps(first + second) if s["state"] != "ACTIVE"]
    assert indexes == sorted(indexes) and len(set(indexes)) == len(indexes)
    assert all(s["conversation_id"] == conversation for s in steps(first + second))
    # The streamed deltas add up to the response.
    deltas = "".join(s.get("text_delta", "") for s in steps(second, "agent_response"))
    assert deltas == two["response"]
    sim.close_stdin()
    assert sim.wait() == 0


def test_resume_continues_steps_and_totals(sims: SimFactory) -> None:
    first = sims.start("--model", "sim-a")
    conversation = first.next_event()["conversation_id"]
    first.send("remember this")
    turn1 = first.turn()
    first.close_stdin()
    assert first.wait() == 0
    last_index = max(s["step_index"] for s in steps(turn1))

    second = sims.start("--model", "sim-a", "--conversation", conversation)
    init = second.next_event()
    assert (init["event"], init["conversation_id"]) == ("init", conversation)
    second.send("and now")
    turn2 = second.turn()
    kinds = [(s["step_type"], s["step_index"]) for s in steps(turn2) if s["state"] == "DONE"]
    assert kinds[0] == ("user_input", last_index + 1)
    assert kinds[1] == ("system_message", last_index + 2)
    assert "text_delta" not in steps(turn2, "system_message")[0]
    one, two = result_of(turn1), result_of(turn2)
    assert two["num_turns"] == 2
    assert two["usage"]["input_tokens"] > one["usage"]["input_tokens"]
    assert two["duration_seconds"] >= one["duration_seconds"]
    # Only the first turn of a resumed process carries the system_message.
    second.send("once more")
    assert steps(second.turn(), "system_message") == []


def test_continue_resumes_the_latest_conversation_here(sims: SimFactory) -> None:
    first = sims.start()
    conversation = first.next_event()["conversation_id"]
    first.send("hi")
    first.turn()
    first.close_stdin()
    first.wait()
    assert sims.start("--continue").next_event()["conversation_id"] == conversation


def test_unknown_conversation_exits_before_init(sims: SimFactory) -> None:
    sim = sims.start("--conversation", "no-such-id")
    assert sim.rest() == []
    assert sim.wait() == 1
    assert "error: conversation no-such-id not found" in sim.stderr()


def test_unknown_model_answers_a_result_without_init(sims: SimFactory) -> None:
    sim = sims.start("--model", "nonexistent-xyz", "--effort", "high")
    lines = sim.rest()
    assert sim.wait() == 1
    (line,) = lines
    result = json.loads(line)["result"]
    assert (result["conversation_id"], result["status"], result["response"]) == ("", "ERROR", "")
    assert result["error"].startswith(
        'invalid model selection (--model "nonexistent-xyz" --effort "high"): model '
        "nonexistent-xyz is not recognized"
    )
    assert "\nAvailable models:\n  " in result["error"]
    assert (result["num_turns"], result["usage"]["total_tokens"]) == (0, 0)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"reply with exactly: alpha\n", "failed to decode stream input: invalid character 'r'"),
        (b'{"prompt":"x"}\n', 'stream input message is missing the "event" field'),
        (
            b'{"event":"user","message":{"content":[{"type":"image","source":{}}]}}\n',
            'stream input content block type "image" is not supported (only "text")',
        ),
    ],
)
def test_bad_stdin_line_is_fatal(sims: SimFactory, raw: bytes, error: str) -> None:
    sim = sims.start()
    conversation = sim.next_event()["conversation_id"]
    sim.send_raw(raw)
    result = result_of(sim.turn())
    assert (result["status"], result["response"], result["num_turns"]) == ("ERROR", "", 0)
    assert result["conversation_id"] == conversation
    assert result["error"].startswith(error)
    assert sim.rest() == []
    assert sim.wait() == 1


def test_input_error_after_a_turn_keeps_the_totals(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("one")
    ok = result_of(sim.turn())
    sim.send_raw(b'{"event":"user","message":{"content":[{"type":"image"}]}}\n')
    failed = result_of(sim.turn())
    assert failed["num_turns"] == ok["num_turns"] == 1
    assert failed["usage"] == ok["usage"]
    assert sim.wait() == 1


def test_other_events_are_ignored_and_blank_lines_skipped(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send_raw(b'{"event":"bogus_event"}\n\n')
    sim.send("still here")
    assert result_of(sim.turn())["response"] == "You said: still here\n"
    sim.close_stdin()
    assert sim.wait() == 0
    assert 'warning: ignoring stream input event "bogus_event"' in sim.stderr()


def test_eof_during_a_turn_finishes_it(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.send("slow [[sleep 0.3]]")
    sim.close_stdin()
    assert result_of(sim.turn())["status"] == "SUCCESS"
    assert sim.rest() == []
    assert sim.wait() == 0


def test_swallowed_flag_becomes_the_prompt(sims: SimFactory) -> None:
    sim = sims.start(
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "-p",
        "--dangerously-skip-permissions",
        stream=False,
    )
    init = sim.next_event()["init"]
    assert init["permission_mode"] == "request-review"  # the flag was lost
    assert result_of(sim.turn())["response"] == "You said: --dangerously-skip-permissions\n"


def test_mcp_config_syntax_error_is_fatal(sims: SimFactory) -> None:
    workspace = sims.root / "session"
    make_plugin(workspace, mcp_raw='{"mcpServers": {"chat": ')
    sim = sims.start("--add-dir", str(workspace))
    (line,) = sim.rest()
    result = json.loads(line)["result"]
    assert (result["status"], result["conversation_id"]) == ("ERROR", "")
    assert "mcp_config.json" in result["error"]
    assert sim.wait() == 1


def test_signed_out_print_mode_answers_an_error_result(sims: SimFactory) -> None:
    sim = sims.start(AGY_SIM_SIGNED_OUT="1")
    (line,) = sim.rest()
    assert "Please sign in" in json.loads(line)["result"]["error"]
    assert sim.wait() == 1
    assert "Please sign in" in sim.stderr()


@pytest.mark.parametrize(
    ("login", "words"),
    [
        (None, "Please sign in"),
        ("not json", "Please sign in"),
        ("{}", "Please sign in"),
        ('{"account": "a@b.invalid", "quota": true}', "Individual quota reached"),
    ],
)
def test_the_login_file_fails_the_start_before_init(
    sims: SimFactory, login: str | None, words: str
) -> None:
    """A resume too: the conversation is not looked at, let alone forgotten."""
    first = sims.start()
    conversation = first.next_event()["conversation_id"]
    first.close_stdin()
    assert first.wait() == 0
    saved = sims.home.joinpath("sim-login.json").read_text()
    if login is None:
        sims.home.joinpath("sim-login.json").unlink()
    else:
        sims.home.joinpath("sim-login.json").write_text(login)
    sim = sims.start("--conversation", conversation)
    (line,) = sim.rest()  # no init
    result = json.loads(line)["result"]
    assert (result["status"], result["conversation_id"], result["num_turns"]) == ("ERROR", "", 0)
    assert words in result["error"]
    assert sim.wait() == 1
    assert words in sim.stderr()

    sims.home.joinpath("sim-login.json").write_text(saved)  # signed in again / quota reset
    again = sims.start("--conversation", conversation)
    assert again.next_event()["conversation_id"] == conversation


def test_models_follows_the_login_file(sims: SimFactory) -> None:
    sims.home.joinpath("sim-login.json").unlink()
    done = sims.run("models")
    assert done.returncode == 1 and "Please sign in" in done.stderr
    signed = sims.run("auth", "login")
    assert signed.returncode == 0 and "Authenticated as" in signed.stdout
    assert sims.run("models").returncode == 0


def test_an_expired_login_is_refreshed_and_written_back(sims: SimFactory) -> None:
    login = sims.home / "sim-login.json"
    login.write_text(json.dumps({"account": "a@b.invalid", "expiry": 1.0}))
    sim = sims.start()
    assert sim.next_event()["event"] == "init"
    sim.close_stdin()
    assert sim.wait() == 0
    stored = json.loads(login.read_text())
    assert stored["expiry"] > 1.0 and stored["refreshes"] == 1


def test_print_timeout(sims: SimFactory) -> None:
    sim = sims.start("--print-timeout", "300ms")
    sim.next_event()
    sim.send("[[hang]]")
    result = result_of(sim.turn())
    assert (result["status"], result["error"], result["response"]) == (
        "ERROR",
        "timeout waiting for response",
        "",
    )
    assert result["num_turns"] == 1
    assert sim.wait() == 1


def test_startup_delay_then_init(sims: SimFactory) -> None:
    sim = sims.start(AGY_SIM_STARTUP_DELAY="0.05")
    assert sim.next_event()["event"] == "init"


@pytest.fixture
def child_pids() -> Iterator[list[int]]:
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + 10
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text().strip()


def test_sigint_mid_turn_leaves_the_command_child_running(
    sims: SimFactory, child_pids: list[int]
) -> None:
    sim = sims.start()
    conversation = sim.next_event()["conversation_id"]
    sim.send("[[tool run_command echo $$ > child.pid; exec sleep 30]]")
    sim.until("step_update", step_type="tool", state="ACTIVE")
    pid = int(_wait_for_file(sims.cwd / "child.pid"))
    child_pids.append(pid)
    sim.interrupt()
    events = sim.turn()
    result = result_of(events)
    assert (result["status"], result["error"], result["response"]) == ("ERROR", "interrupted", "")
    assert result["num_turns"] == 1
    assert all(s["state"] != "DONE" for s in steps(events, "tool"))  # left ACTIVE
    assert sim.wait() == 1
    assert "error: interrupted" in sim.stderr()
    assert _alive(pid), "agy leaves run_command children running; the host cleans up"
    # The interrupted turn is stored: a resume counts it.
    resumed = sims.start("--conversation", conversation)
    resumed.next_event()
    resumed.send("after")
    assert result_of(resumed.turn())["num_turns"] == 2


def test_sigint_while_idle_exits_quietly(sims: SimFactory) -> None:
    sim = sims.start()
    sim.next_event()
    sim.interrupt()
    assert sim.rest() == []
    assert sim.wait() == 1
    assert sim.stderr() == ""
