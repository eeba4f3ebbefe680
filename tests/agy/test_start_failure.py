"""Why agy could not start, classified in the agy layer so the core never reads agy's words."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bridge.agy import wire
from bridge.agy.process import AgyStartError, ProcessExit, ProcessSpec, open_agy
from bridge.agy.start_failure import StartFailure, classify, forgets_conversation
from tests.doubles import signed_in

SIM = [sys.executable, "-m", "bridge.simulator"]
FLAGS = ["--print=", "--input-format", "stream-json", "--output-format", "stream-json"]


def _spec(tmp_path: Path, *extra: str) -> ProcessSpec:
    return ProcessSpec(
        argv=[*SIM, *FLAGS, *extra],
        env={**os.environ, "AGY_SIM_HOME": str(signed_in(tmp_path / "home"))},
        cwd=tmp_path,
        init_timeout=20,
        stop_grace=2,
    )


async def _start_error(spec: ProcessSpec) -> AgyStartError:
    with pytest.raises(AgyStartError) as caught:
        async with open_agy(spec, lambda _: None):
            raise AssertionError("agy must not start")
    return caught.value


async def _conversation(tmp_path: Path) -> str:
    async with open_agy(_spec(tmp_path), lambda _: None) as proc:
        return proc.conversation_id


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("", StartFailure.SIGNED_OUT),
        ('{"account": "a@b.invalid", "quota": true}', StartFailure.QUOTA),
    ],
)
async def test_a_resume_refused_by_the_account_keeps_the_conversation(
    tmp_path: Path, state: str, expected: StartFailure
) -> None:
    conversation = await _conversation(tmp_path)
    (tmp_path / "home" / "sim-login.json").write_text(state)
    error = await _start_error(_spec(tmp_path, "--conversation", conversation))
    assert classify(error) is expected
    assert not forgets_conversation(error)


@pytest.mark.anyio
async def test_an_unknown_conversation_is_forgotten(tmp_path: Path) -> None:
    error = await _start_error(_spec(tmp_path, "--conversation", "no-such-id"))
    assert classify(error) is StartFailure.CONVERSATION_UNKNOWN
    assert forgets_conversation(error)


@pytest.mark.anyio
async def test_an_unknown_model(tmp_path: Path) -> None:
    error = await _start_error(_spec(tmp_path, "--model", "nonexistent-xyz"))
    assert classify(error) is StartFailure.MODEL
    assert not forgets_conversation(error)


@pytest.mark.anyio
async def test_agy_not_installed(tmp_path: Path) -> None:
    spec = ProcessSpec(argv=[str(tmp_path / "no-agy")], env={}, cwd=tmp_path)
    error = await _start_error(spec)
    assert classify(error) is StartFailure.MISSING


def _exited(stderr: str, code: int = 1) -> AgyStartError:
    exit = ProcessExit(code, stderr)
    return AgyStartError("exited", f"agy exited before it started ({exit.describe()})", exit=exit)


def _result(error: str) -> AgyStartError:
    result = wire.ResultInfo(conversation_id="", status="ERROR", error=error)
    return AgyStartError("error_result", error, result=result)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_exited("error: conversation 1234 not found\n"), StartFailure.CONVERSATION_UNKNOWN),
        (_exited("Error: failed to load trajectory abc: no such conversation"), "unknown"),
        (_exited("Please sign in to continue\n"), StartFailure.SIGNED_OUT),
        (_exited("error: not authenticated; run agy to log in"), StartFailure.SIGNED_OUT),
        (_exited("your login has expired"), StartFailure.SIGNED_OUT),
        (_exited("oauth2: token expired and refresh token is not set"), StartFailure.SIGNED_OUT),
        # Login words win over the conversation: a signed-out resume keeps its id.
        (_exited("conversation abc: please sign in first"), StartFailure.SIGNED_OUT),
        (_result("Individual quota reached. Resets in 3h."), StartFailure.QUOTA),
        (_result("RESOURCE_EXHAUSTED: rate limit exceeded"), StartFailure.QUOTA),
        (_result('invalid model selection (--model "x" --effort ""): …'), StartFailure.MODEL),
        (_exited("panic: runtime error: index out of range"), StartFailure.OTHER),
        (_exited(""), StartFailure.OTHER),
        (AgyStartError("timeout", "agy did not start within 90 s"), StartFailure.TIMEOUT),
    ],
)
def test_agys_words_are_classified(error: AgyStartError, expected: StartFailure | str) -> None:
    if expected == "unknown":
        expected = StartFailure.CONVERSATION_UNKNOWN
    assert classify(error) is expected
    assert forgets_conversation(error) == (expected is StartFailure.CONVERSATION_UNKNOWN)


def test_every_failure_has_advice_in_plain_words() -> None:
    for failure in StartFailure:
        assert failure.advice and "agy" in failure.advice
