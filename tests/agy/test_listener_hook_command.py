"""hook_command, run for real under ``sh -c`` as agy runs it, against a live listener."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import anyio
import pytest

from bridge.agy.listener import (
    answer_deadline,
    hook_command,
    open_listener,
    tool_hook_command,
    tool_hook_timing,
)
from bridge.agy.listener.hook_command import UNREACHABLE_DENIAL, curl_max_time, url_file_text
from bridge.agy.wire import HookInput, HookReply, InjectedStep, ToolDecision
from tests.ports import free_port as unused_port

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="hook commands run curl")

HOOK_INPUT = {"conversationId": "conv-9", "invocationNum": 0, "initialNumSteps": 2}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def run_hook(command: str, stdin: bytes, env: dict[str, str] | None = None) -> bytes:
    """Run ``command`` like agy does and return its stdout; the hook must always exit 0."""
    # A guard against a hang, not a speed check.
    with anyio.fail_after(20):
        result = await anyio.run_process(["/bin/sh", "-c", command], input=stdin, env=env)
    assert result.returncode == 0
    return result.stdout


def url_at(folder: Path, url: str) -> Path:
    """A curl config file holding ``url``, as the bridge writes one beside ``hooks.json``."""
    folder = folder / "urls"
    folder.mkdir(exist_ok=True)
    path = folder / f"{len(list(folder.iterdir()))}.curl"
    path.write_text(url_file_text(url))
    return path


@pytest.mark.anyio
async def test_the_listeners_answer_passes_through_unchanged(tmp_path: Path) -> None:
    calls: list[HookInput] = []
    reply = HookReply(inject_steps=[InjectedStep(user_message='Bo said: "stop" \u2028 ok')])

    async def hook(event: str, hook_input: HookInput) -> HookReply:
        calls.append(hook_input)
        return reply

    async with open_listener() as listener:
        registration = await listener.register(hook)
        command = hook_command(url_at(tmp_path, registration.hook_url("PreInvocation")), 10)
        out = await run_hook(command, json.dumps(HOOK_INPUT).encode())
    assert out == reply.to_json()
    assert [c.conversation_id for c in calls] == ["conv-9"]


@pytest.mark.anyio
async def test_an_unreachable_bridge_prints_empty_braces(tmp_path: Path) -> None:
    command = hook_command(
        url_at(tmp_path, f"http://127.0.0.1:{unused_port()}/tok/hook/PreInvocation"), 10
    )
    assert await run_hook(command, b"{}") == b"{}"


@pytest.mark.anyio
async def test_an_error_answer_prints_empty_braces(tmp_path: Path) -> None:
    async def hook(event: str, hook_input: HookInput) -> HookReply:
        return HookReply(inject_steps=[InjectedStep(user_message="must not be seen")])

    async with open_listener(max_body_bytes=64) as listener:
        registration = await listener.register(hook)
        url = registration.hook_url("PreInvocation")
        wrong = url.replace("/hook/", "/nothook/")
        not_found = await run_hook(hook_command(url_at(tmp_path, wrong), 10), b"{}")
        too_large = await run_hook(hook_command(url_at(tmp_path, url), 10), b" " * 200)
        bad_json = await run_hook(hook_command(url_at(tmp_path, url), 10), b"{oops")
    assert (not_found, too_large, bad_json) == (b"{}", b"{}", b"{}")


@pytest.mark.anyio
async def test_a_bridge_that_never_answers_gives_empty_braces_before_the_hook_timeout(
    tmp_path: Path,
) -> None:
    entered = anyio.Event()

    async def stuck(event: str, hook_input: HookInput) -> HookReply:
        entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_listener() as listener:
        registration = await listener.register(stuck)
        out = await run_hook(
            hook_command(url_at(tmp_path, registration.hook_url("PreInvocation")), 2), b"{}"
        )
    assert entered.is_set()
    assert out == b"{}"


@pytest.mark.anyio
async def test_a_proxy_in_the_environment_is_not_used(tmp_path: Path) -> None:
    async def hook(event: str, hook_input: HookInput) -> HookReply:
        return HookReply(inject_steps=[InjectedStep(user_message="direct")])

    dead_proxy = f"http://127.0.0.1:{unused_port()}"
    env = dict(os.environ) | {"http_proxy": dead_proxy, "HTTP_PROXY": dead_proxy, "NO_PROXY": ""}
    async with open_listener() as listener:
        registration = await listener.register(hook)
        out = await run_hook(
            hook_command(url_at(tmp_path, registration.hook_url("Stop")), 10), b"{}", env
        )
    assert json.loads(out) == {"injectSteps": [{"userMessage": "direct"}]}


@pytest.mark.anyio
async def test_without_curl_the_hook_still_reads_its_input_and_prints_empty_braces(
    tmp_path: Path,
) -> None:
    cat = shutil.which("cat")
    assert cat is not None
    (tmp_path / "cat").symlink_to(cat)
    env = {"PATH": str(tmp_path)}  # a machine with no curl
    command = hook_command(url_at(tmp_path, f"http://127.0.0.1:{unused_port()}/t/hook/Stop"), 10)
    assert await run_hook(command, b"{}", env) == b"{}"


@pytest.mark.anyio
async def test_the_url_stays_out_of_the_command_and_its_file_name_is_quoted(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "pwned"
    # Run by the shell, these would make the marker in $HOME (a file name holds no slash).
    folder = tmp_path / "a'b;$(cd;touch pwned)`cd;touch pwned`"
    folder.mkdir()
    url = f"http://127.0.0.1:{unused_port()}/secret-token/hook/X"
    command = hook_command(url_at(folder, url), 5)
    # The token is in the file, never on the command line (argv is public in ps).
    assert "secret-token" not in command and "http" not in command
    assert shlex.quote(str(folder / "urls" / "0.curl")) in command
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    assert await run_hook(command, b"{}", env) == b"{}"
    assert not marker.exists()


def test_a_url_file_is_one_quoted_curl_option() -> None:
    assert url_file_text('http://127.0.0.1:1/t"k\\n/hook/X') == (
        'url = "http://127.0.0.1:1/t\\"k\\\\n/hook/X"\n'
    )
    with pytest.raises(ValueError):
        url_file_text("http://127.0.0.1:1/t\n-o /etc/passwd")


@pytest.mark.parametrize("timeout", [1, 2, 5, 10, 30])
def test_curl_gives_up_before_agys_hook_timeout(timeout: int, tmp_path: Path) -> None:
    command = hook_command(url_at(tmp_path, "http://127.0.0.1:1/t/hook/Stop"), timeout)
    max_time = re.search(r"--max-time (\S+)", command)
    connect = re.search(r"--connect-timeout (\S+)", command)
    assert max_time and connect
    assert 0 < float(connect.group(1)) <= float(max_time.group(1)) < timeout


def test_a_timeout_under_one_second_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        hook_command(url_at(tmp_path, "http://127.0.0.1:1/t/hook/Stop"), 0)


@pytest.mark.anyio
async def test_the_listener_answers_before_curl_gives_up_and_the_late_reply_is_reported(
    tmp_path: Path,
) -> None:
    """With agy's 2 s timeout curl waits 1.6 s; the listener answers `{}` well before that, so
    curl always reads an answer, and the reply that came too late is handed back."""
    release = anyio.Event()
    late = HookReply(inject_steps=[InjectedStep(user_message="Ana: too late")])
    reported: list[tuple[str, object]] = []
    told = anyio.Event()

    async def slow(event: str, hook_input: HookInput) -> HookReply:
        await release.wait()
        return late

    async def undelivered(event: str, answer: object) -> None:
        reported.append((event, answer))
        told.set()

    async with open_listener() as listener:
        registration = await listener.register(
            slow, answer_within={"PreInvocation": answer_deadline(2)}, on_undelivered=undelivered
        )
        url = registration.hook_url("PreInvocation")
        out = await run_hook(
            hook_command(url_at(tmp_path, url), 2), json.dumps(HOOK_INPUT).encode()
        )
        assert out == b"{}" and not release.is_set()
        release.set()
        await told.wait()
    assert reported == [("PreInvocation", late)]


@pytest.mark.parametrize("timeout", [1, 2, 5, 10, 30, 610])
def test_the_listener_deadline_sits_well_under_curls(timeout: int) -> None:
    assert 0 < answer_deadline(timeout) < curl_max_time(timeout) - 0.19 < timeout


# --- the PreToolUse command ---------------------------------------------------------------

TOOL_INPUT = {"conversationId": "conv-9", "toolCall": {"name": "run_command", "args": {}}}


@pytest.mark.anyio
async def test_the_tool_hook_passes_the_listeners_decision_through(tmp_path: Path) -> None:
    decision = ToolDecision(decision="allow")

    async def hook(event: str, hook_input: HookInput) -> ToolDecision:
        return decision

    async with open_listener() as listener:
        registration = await listener.register(hook)
        command = tool_hook_command(url_at(tmp_path, registration.hook_url("PreToolUse")), 10)
        out = await run_hook(command, json.dumps(TOOL_INPUT).encode())
    assert out == decision.to_json() == b'{"decision":"allow"}'


@pytest.mark.anyio
async def test_the_tool_hook_denies_when_the_bridge_cannot_be_reached_or_gives_no_decision(
    tmp_path: Path,
) -> None:
    async def wrong(event: str, hook_input: HookInput) -> HookReply:
        return HookReply()  # `{}`: not a decision

    unreachable = tool_hook_command(
        url_at(tmp_path, f"http://127.0.0.1:{unused_port()}/t/hook/PreToolUse"), 10
    )
    outputs = [await run_hook(unreachable, json.dumps(TOOL_INPUT).encode())]
    async with open_listener() as listener:
        registration = await listener.register(wrong)
        url = registration.hook_url("PreToolUse")
        outputs.append(
            await run_hook(
                tool_hook_command(url_at(tmp_path, url), 10), json.dumps(TOOL_INPUT).encode()
            )
        )
        not_found = url.replace("/hook/", "/nothook/")
        outputs.append(await run_hook(tool_hook_command(url_at(tmp_path, not_found), 10), b"{}"))
        outputs.append(
            await run_hook(tool_hook_command(url_at(tmp_path, url), 10), b"{oops")
        )  # 400
    for out in outputs:
        assert out == UNREACHABLE_DENIAL.encode()
        reply = json.loads(out)
        assert set(reply) == {"decision", "reason"} and reply["decision"] == "deny"
        assert "could not be reached" in reply["reason"]


@pytest.mark.anyio
async def test_without_curl_the_tool_hook_reads_its_input_and_denies(tmp_path: Path) -> None:
    cat = shutil.which("cat")
    assert cat is not None
    (tmp_path / "cat").symlink_to(cat)
    command = tool_hook_command(
        url_at(tmp_path, f"http://127.0.0.1:{unused_port()}/t/hook/PreToolUse"), 10
    )
    out = await run_hook(command, b"{}", {"PATH": str(tmp_path)})
    assert json.loads(out)["decision"] == "deny"


@pytest.mark.parametrize("approval", [0, 30, 600])
def test_tool_hook_timing_sits_above_the_approval_timeout(approval: int, tmp_path: Path) -> None:
    timing = tool_hook_timing(approval)
    assert approval < timing.answer_within < curl_max_time(timing.hook_timeout)
    command = tool_hook_command(
        url_at(tmp_path, "http://127.0.0.1:1/t/hook/PreToolUse"), timing.hook_timeout
    )
    max_time = re.search(r"--max-time (\S+)", command)
    assert max_time and approval < float(max_time.group(1)) < timing.hook_timeout
