"""One agy process (the simulator) through bridge.agy.process: start, turns, failures, stop."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from bridge.agy import wire
from bridge.agy.process import AgyStartError, ProcessExit, ProcessSpec, open_agy, pid_state
from tests.doubles import signed_in

pytestmark = pytest.mark.anyio
SIM = [sys.executable, "-m", "bridge.simulator"]
FLAGS = ["--input-format", "stream-json", "--output-format", "stream-json", "--print", ""]


def spec(tmp_path: Path, *extra: str, init_timeout: float = 20, **env: str) -> ProcessSpec:
    return ProcessSpec(
        argv=[*SIM, *FLAGS, *extra],
        env={**os.environ, "AGY_SIM_HOME": str(signed_in(tmp_path / "home")), **env},
        cwd=tmp_path,
        init_timeout=init_timeout,
        stop_grace=2,
    )


async def until_result(proc: object) -> wire.ResultInfo:
    while True:
        out = await proc.next()  # type: ignore[attr-defined]
        if isinstance(out, wire.ResultEvent):
            return out.result
        assert not isinstance(out, ProcessExit), out


@pytest.mark.parametrize("layout", ["beside", "inside"])
async def test_init_in_either_layout_then_two_turns(tmp_path: Path, layout: str) -> None:
    bad: list[str] = []
    async with open_agy(spec(tmp_path, AGY_SIM_INIT_LAYOUT=layout), bad.append) as proc:
        assert proc.conversation_id
        await proc.send_turn(["one"])
        assert (await until_result(proc)).response.startswith("You said: one")
        await proc.send_turn(["two"])
        result = await until_result(proc)
        assert result.num_turns == 2 and result.ok
    assert bad == []


async def test_init_that_never_comes_is_a_timeout(tmp_path: Path) -> None:
    with pytest.raises(AgyStartError) as caught:
        async with open_agy(
            spec(tmp_path, init_timeout=0.5, AGY_SIM_STARTUP_DELAY="30"), lambda _: None
        ):
            raise AssertionError("must not start")
    assert caught.value.kind == "timeout" and "did not start within 0.5 s" in caught.value.message


async def test_exit_before_init_carries_stderr(tmp_path: Path) -> None:
    with pytest.raises(AgyStartError) as caught:
        async with open_agy(spec(tmp_path, "--conversation", "nope"), lambda _: None):
            raise AssertionError("must not start")
    assert caught.value.kind == "exited"
    assert caught.value.exit is not None and "not found" in caught.value.exit.stderr_tail


async def test_a_result_before_init_is_an_error_in_agys_words(tmp_path: Path) -> None:
    with pytest.raises(AgyStartError) as caught:
        async with open_agy(spec(tmp_path, "--model", "bogus-model"), lambda _: None):
            raise AssertionError("must not start")
    assert caught.value.kind == "error_result"
    assert "invalid model selection" in caught.value.message


async def test_missing_binary(tmp_path: Path) -> None:
    missing = ProcessSpec(argv=["/no/such/agy"], env=dict(os.environ), cwd=tmp_path)
    with pytest.raises(AgyStartError) as caught:
        async with open_agy(missing, lambda _: None):
            raise AssertionError("must not start")
    assert caught.value.kind == "missing"


async def test_bad_lines_are_reported_and_the_reader_goes_on(tmp_path: Path) -> None:
    bad: list[str] = []
    async with open_agy(spec(tmp_path), bad.append) as proc:
        await proc.send_turn(["[[garbage]] [[bigline 100000]] ok"])
        assert (await until_result(proc)).ok
    assert any("not JSON" in b for b in bad) and any("not a JSON object" in b for b in bad)


async def test_sigint_mid_tool_then_close_leaves_no_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    async with open_agy(spec(tmp_path), lambda _: None) as proc:
        await proc.send_turn([f"[[tool run_command echo $$ > {pidfile}; exec sleep 60]]"])
        with anyio.fail_after(20):
            while not (pidfile.exists() and pidfile.read_text().strip()):
                await anyio.sleep(0.02)
        child = int(pidfile.read_text())
        proc.interrupt()
        result = await until_result(proc)
        assert result.error == "interrupted"
        exited = await proc.next()
        assert isinstance(exited, ProcessExit) and exited.code == 1
        # agy is gone but its command lives on in agy's process group ...
        assert pid_state(child) not in (None, "Z")
    # ... until the process is closed: the whole group is ended.
    with anyio.fail_after(10):
        while pid_state(child) not in (None, "Z"):
            await anyio.sleep(0.02)


async def test_stdin_eof_ends_a_process_cleanly(tmp_path: Path) -> None:
    async with open_agy(spec(tmp_path), lambda _: None) as proc:
        pid = proc.pid
    assert pid_state(pid) in (None, "Z")


async def test_nulls_in_optional_fields_lose_no_event(tmp_path: Path) -> None:
    """Go writes null for a nil slice or pointer: such a result must still end the turn."""
    bad: list[str] = []
    async with open_agy(spec(tmp_path), bad.append) as proc:
        await proc.send_turn(["[[nulls]] [[calls 2]] [[reply done]]"])
        with anyio.fail_after(30):  # a guard against a hang (a lost result), not a speed check
            result = await until_result(proc)
    assert result.ok and result.response == "done\n" and result.denied_actions == []
    assert bad == []
