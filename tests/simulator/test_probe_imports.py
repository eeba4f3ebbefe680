"""What a simulator process imports: the probe next to nothing, a plain turn no event loop
and no network client.

The bridge probes agy with ``--help`` and ``--version`` before every start, and a test run
starts hundreds of such probes: each one should cost about what a bare interpreter costs
(bench/simulator_cost.py measures it). CPU is not asserted here (a busy machine would make
that flaky); the modules are, by name: Python's own ``-X importtime`` report of a probe,
against that of ``python -c pass`` in the same environment.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.simulator.driver import STREAM_ARGS, SimFactory, make_plugin, user_line

# What ``python -m bridge.simulator`` needs beyond a bare interpreter and runpy: what
# ``from __future__ import annotations`` imports when the interpreter has not loaded it yet,
# the packages, cli.py and flags.py.
PROBE_MODULES = frozenset(
    {
        "runpy",
        "__future__",
        "importlib",
        "importlib._abc",
        "importlib.machinery",
        "importlib.util",
        "types",
        "bridge",
        "bridge.simulator",
        "bridge.simulator.cli",
        "bridge.simulator.flags",
    }
)
# Modules a probe once loaded (about 100 ms of CPU each time) and must not load again.
HEAVY = (
    "asyncio",
    "ssl",
    "socket",
    "selectors",
    "subprocess",
    "threading",
    "concurrent.futures",
    "logging",
    "json",
    "dataclasses",
    "inspect",
    "typing",
    "tempfile",
    "uuid",
    "urllib.request",
    "http.client",
    "email",
    "bridge.simulator.account",
    "bridge.simulator.process",
)
# A turn that calls no MCP tool runs hooks, writes events and stores its conversation: it
# needs no event loop (it waits on its main thread: bridge/simulator/waits.py), no HTTP
# client, and no SDK.
NOT_IN_A_PLAIN_TURN = (
    "asyncio",
    "ssl",
    "socket",
    "concurrent.futures",
    "logging",
    "urllib.request",
    "http.client",
    "email",
    "tempfile",
    "uuid",
    "mcp",
    "anyio",
    "pydantic",
    "bridge.simulator.mcp_call",
    # What a turn once loaded for its own sake (about 40 ms of CPU in a 90 ms process).
    "typing",
    "dataclasses",
    "inspect",
    "datetime",
)
# The standard library a plain turn may use: what these import on this Python is its floor
# (``json`` brings ``re``, ``subprocess`` brings ``selectors``, ``signal`` and ``threading``).
TURN_STDLIB = (
    "runpy",
    "__future__",
    "os",
    "sys",
    "time",
    "types",
    "json",
    "re",
    "subprocess",
    "threading",
    "queue",
    "signal",
    "contextlib",
    "collections.abc",
    "pathlib",  # plugins, rules and hook handlers hold pathlib paths, as tests read them
)
# The simulator's own modules a plain turn loads: not mcp_call (the SDK's client).
TURN_MODULES = frozenset(
    {
        "bridge",
        "bridge.simulator",
        *(
            f"bridge.simulator.{name}"
            for name in (
                "cli flags process account atomic context events hooks plugins record store "
                "waits models stream_input noise script commands tool_steps turn"
            ).split()
        ),
    }
)


def imported(stderr: str) -> set[str]:
    """Module names in an ``-X importtime`` report (``import time: self | total | name``)."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the report's header line
                names.add(name)
    return names


def bare(sims: SimFactory, code: str = "pass") -> set[str]:
    """What ``python -c code`` imports in the simulator's environment."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=sims.cwd,
        env=sims.env(),
        capture_output=True,
        text=True,
        timeout=sims.seconds_left(),
        check=True,
    )
    return imported(done.stderr)


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_the_probe_imports_nothing_it_does_not_print(sims: SimFactory, flag: str) -> None:
    done = sims.run(flag, PYTHONPROFILEIMPORTTIME="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("agy " if flag == "--version" else "Antigravity CLI")
    probe = imported(done.stderr)
    assert "bridge.simulator.flags" in probe  # the report was read
    # runpy (``-m``) and what it imports: the finder of a default editable install loads these
    # at start too; the "compat" install the Makefile makes does not.
    extra = probe - bare(sims, "import runpy")
    heavy = sorted(name for name in extra if _under(name, HEAVY))
    assert not heavy, f"the {flag} probe imports {heavy}"
    assert extra <= PROBE_MODULES, f"the {flag} probe imports more: {sorted(extra - PROBE_MODULES)}"


def turn_imports(sims: SimFactory, text: str, *args: str) -> tuple[bytes, set[str]]:
    """One successful stream-json turn under ``-X importtime``: its stdout, and the modules it
    imported (the turn's own module among them: the turn ran, and the report was read)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bridge.simulator", *STREAM_ARGS, *args],
        input=user_line(text),
        cwd=sims.cwd,
        env=sims.env(),
        capture_output=True,
        timeout=sims.seconds_left(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert b'"status":"SUCCESS"' in done.stdout
    modules = imported(done.stderr.decode())
    assert "bridge.simulator.turn" in modules
    return done.stdout, modules


def test_a_turn_without_tools_imports_no_event_loop_http_client_or_sdk(sims: SimFactory) -> None:
    _, modules = turn_imports(sims, "hello")
    loaded = sorted(name for name in modules if _under(name, NOT_IN_A_PLAIN_TURN))
    assert not loaded, f"a plain turn imports {loaded}"


def test_a_turn_imports_only_the_simulator_and_the_stdlib_it_names(sims: SimFactory) -> None:
    """Guarded as a probe is: by a list of what may load, not only of what must not. A turn as
    the bridge's (a plugin with hooks and a rule, a ``run_command`` the PreToolUse hook allows)
    loads its modules, and the standard library that ``TURN_STDLIB`` pulls in on this Python
    (measured here, beside the bare interpreter); anything else a change adds (``typing``,
    ``dataclasses``, ``uuid``, ``datetime`` …) is named by this test."""
    workspace = sims.root / "session"
    allow = {"type": "command", "command": """printf '{"decision":"allow","reason":""}'"""}
    hooks = {
        "bridge": {
            "PreInvocation": [{"type": "command", "command": "cat >/dev/null; printf '{}'"}],
            "PreToolUse": [{"matcher": "*", "hooks": [allow]}],
        }
    }
    rule = b"---\ntrigger: always_on\n---\nAnswer briefly.\n"
    make_plugin(workspace, hooks=hooks, rules={"brief.md": rule})
    stdout, turn = turn_imports(
        sims, "[[tool run_command true]] hello", "--add-dir", str(workspace)
    )
    assert b'"state":"DONE","step_type":"tool"' in stdout  # allowed by the hook, ran
    floor = bare(sims, "import " + ", ".join(TURN_STDLIB))
    extra = turn - floor - TURN_MODULES
    assert not extra, f"a plain turn imports more: {sorted(extra)}"


def _under(name: str, packages: tuple[str, ...]) -> bool:
    """``name`` is one of ``packages`` or a module inside one."""
    return any(name == package or name.startswith(package + ".") for package in packages)
