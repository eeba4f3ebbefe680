"""What a start imports: every `python -m bridge` the tests start (and every operator's) pays
for it in CPU. The MCP SDK is about half of a start and most agy processes never call the chat
tools, so it is imported with the first call; the console's screen (rich) only by the console.
Each check reads a fresh interpreter (five of them one interpreter's stages): the test process
has imported everything already."""

from __future__ import annotations

import ast
import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from tests.chat.slack.fake_slack import APP_TOKEN, BOT_TOKEN, serve_fake_slack
from tests.doubles import signed_in
from tests.ports import free_port
from tests.source_trees import parse

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("mcp", "mcp_types", "rich", "nio")
# Each test here starts an interpreter that imports the bridge (or imports every deferred
# module in this one): 1-3 s of CPU, but 13-67 s of wall at a load of 13 on two cores, so past
# pytest's 120 s when six workers and more share them. The waits inside are as patient.
pytestmark = pytest.mark.timeout(480)
WALL = 300


# Five checks' imports are read in one fresh interpreter, in stages (a start of its own for
# each was 0.6-1.2 s of CPU): what each stage finds is noted before the next one imports more.
# A module only ever joins ``sys.modules``, so what a stage finds absent was absent from the
# smaller set of imports its test is about: a check made after more imports is no weaker. The
# order keeps each stage's imports from meeting what a later one forbids: the doctor (core,
# chats, aiohttp) before the app; the chats' files before the app too (the app may import
# aiohttp); the models before the turn (a turn builds the events' models).
STAGES = textwrap.dedent("""
    import json, sys

    def note(stage, **found):
        watched = {watched!r}
        found["imported"] = [m for m in watched if m in sys.modules]
        print(json.dumps({{"stage": stage, **found}}), flush=True)

    import bridge.cli, bridge.doctor
    note("doctor")

    from pathlib import Path
    from bridge.config import load_config
    from bridge.doctor import Report, check_chats

    report = Report()
    check_chats(load_config(Path({config!r}), environ={{}}), report)
    note("doctor_reads_chats", lines=report.lines)

    import bridge.app
    note("command")

    import importlib
    from pydantic import BaseModel
    import bridge.chat.slack.adapter

    models = [
        value
        for name in {deferred!r}
        for value in vars(importlib.import_module(name)).values()
        if isinstance(value, type) and issubclass(value, BaseModel)
        and value.__module__ == name and not value.__name__.startswith("_")
    ]
    built = [m.__name__ for m in models if m.__pydantic_complete__]
    from bridge.core.events import Author, ThreadRef
    ref = ThreadRef.model_validate({{"platform": "slack", "channel": "C1", "thread": "1.2"}})
    author = Author(id="U1", display_name="Ada")
    note(
        "models",
        models=len(models),
        built=built,
        used=[ThreadRef.__pydantic_complete__, Author.__pydantic_complete__],
        dumped=ref.model_dump(),
        author=author.model_dump(),
    )

    import anyio
    from tests.core.harness import running

    async def main():
        async with running(Path({turn_dir!r})) as h:
            await h.say("hello")
            [reply] = await h.adapter.wait_finished(1, timeout={wall})
            assert "hello" in reply.outcome.final_text

    anyio.run(main)
    note("turn")
    """)
DOCTOR_WATCHED = (
    *HEAVY,
    "aiohttp",
    "slack_sdk",
    "slack_bolt",
    "gidgethub",
    "starlette",
    "psycopg",
    "bridge.core.core",
    "bridge.app",
)
CHAT_SDKS = ("slack_sdk", "slack_bolt", "aiohttp", "nio", "bridge.chat.matrix.adapter")


def chats_left_files(root: Path) -> Path:
    """A config with Slack and Matrix whose data directory holds two files the adapters wrote
    (agent sessions' support, a cross-signing reset waiting for approval)."""
    data = root / "data"
    (data / "matrix").mkdir(parents=True)
    (data / "slack-agent-sessions.json").write_text('{"state": "unavailable", "reason": "r"}')
    (data / "matrix" / "cross_signing_reset.json").write_text('{"url": "https://mas/reset"}')
    config = root / "config.toml"
    config.write_text(
        f'[bridge]\ndata_dir = "{data}"\n'
        '[slack]\nbot_token = "xoxb-1"\napp_token = "xapp-1"\n'
        '[matrix]\nhomeserver = "https://m.example"\nuser_id = "@bot:m.example"\n'
        'password = "p"\n'
    )
    return config


class Stages:
    """What the staged interpreter noted, stage by stage, and what it said on stderr."""

    def __init__(self, done: dict[str, str]):
        self.stderr = done["stderr"]
        self.noted = {
            found["stage"]: found
            for found in (json.loads(x) for x in done["stdout"].splitlines() if x.startswith("{"))
        }

    def __getitem__(self, stage: str) -> dict[str, Any]:
        # A stage that failed leaves its traceback, and no note from it or the ones after it.
        assert stage in self.noted, self.stderr
        return self.noted[stage]

    def imported(self, stage: str, watched: tuple[str, ...]) -> list[str]:
        return [m for m in self[stage]["imported"] if m in watched]


@pytest.fixture(scope="module")
def stages(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Stages:
    """The staged interpreter, run once a run: the first worker to need it runs it, and a worker
    given the file's other tests reads what it noted (tests/shared_servers.py's records)."""
    from tests.shared_servers import Run, run_of  # a plugin: see tests/conftest.py's postgres

    def run_stages(run: Run) -> dict[str, str]:
        root = tmp_path_factory.mktemp("stages")
        (root / "turn").mkdir()
        probe = STAGES.format(
            watched=tuple(dict.fromkeys((*DOCTOR_WATCHED, *CHAT_SDKS))),
            config=str(chats_left_files(root)),
            deferred=DEFERRED_MODEL_MODULES,
            turn_dir=str(root / "turn"),
            wall=WALL,
        )
        done = subprocess.run(
            [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=WALL
        )
        return {"stdout": done.stdout, "stderr": done.stderr}

    return Stages(run_of(request.config).shared("startup-import-stages", run_stages))


def test_the_command_and_the_doctor_import_no_chat_tools_nor_console_screen(
    stages: Stages,
) -> None:
    assert stages.imported("command", HEAVY) == []


def test_a_turn_that_calls_no_chat_tool_leaves_the_mcp_sdk_unimported(stages: Stages) -> None:
    found = stages.imported("turn", HEAVY)
    assert "mcp" not in found and "mcp_types" not in found


def test_the_doctor_imports_neither_the_core_nor_a_chat_nor_aiohttp(stages: Stages) -> None:
    assert stages.imported("doctor", DOCTOR_WATCHED) == []


def test_the_doctor_reads_what_the_chats_left_without_their_sdks(stages: Stages) -> None:
    # With Slack and Matrix configured, the doctor reads two files the adapters wrote (agent
    # sessions' support, a cross-signing reset waiting for approval): importing Slack's SDK
    # with aiohttp (0.2 s of CPU) or matrix-nio (over a second) for that was most of its start.
    lines = stages["doctor_reads_chats"]["lines"]
    assert any("Slack agent sessions: unavailable (r)" in x for x in lines)
    assert any("open https://mas/reset" in x for x in lines), lines
    assert stages.imported("doctor_reads_chats", CHAT_SDKS) == []


# --- what a console start imports, named ---------------------------------------------------

# The third-party packages a `python -m bridge console` on the simulator imports, from start to
# its orderly end: pydantic (config, agy's events, the neutral types), the store (aiosqlite),
# the listener (uvicorn, its parser httptools, click through uvicorn's own imports),
# the metrics (prometheus_client), the approvals' shell parser (tree_sitter), the schedules'
# cron (cronsim). A package that joins them joins every start the tests and operators make:
# import it where it is used, or name it here and say why.
CONSOLE_PACKAGES = {
    "aiosqlite",
    "annotated_types",
    "anyio",
    "click",
    "cronsim",
    "httptools",
    "orjson",
    "prometheus_client",
    "pydantic",
    "pydantic_core",
    "sniffio",
    "tree_sitter",
    "tree_sitter_bash",
    "typing_extensions",
    "typing_inspection",
    "uvicorn",
}
# The bridge's own modules a console start imports (163 when this was written, from 190
# before the forges, rich and aiohttp were deferred); a little room for a new module or two.
CONSOLE_BRIDGE_MODULES_AT_MOST = 175
# Parts a console start must not import: other chats, the forges' clients and webhooks, the
# web console, the admin endpoint, the doctor, rich's rendering (a terminal only).
NOT_IN_A_CONSOLE = (
    "bridge.chat.slack",
    "bridge.chat.matrix",
    "bridge.web",
    "bridge.forge.github",
    "bridge.forge.gitlab",
    "bridge.forge.webhooks",
    "bridge.core.forge_hooks",
    "bridge.admin",
    "bridge.doctor",
    "bridge.chat.console.rendering",
)
# Every start probes agy's flags and version: once each per process and binary.
PROBE_LOG = """#!/bin/sh
echo "$*" >> "$AGY_CALLS"
exec {python} -m bridge.simulator "$@"
"""
DUMP_AT_EXIT = """
import atexit, json, runpy, sys, sysconfig

def dump():
    site = sysconfig.get_paths()["purelib"]
    third = {{
        name.split(".")[0]
        for name, module in list(sys.modules.items())
        if (getattr(module, "__file__", None) or "").startswith(site)
    }}
    own = [name for name in sys.modules if name == "bridge" or name.startswith("bridge.")]
    with open({out!r}, "w") as f:
        json.dump({{"third": sorted(third), "own": sorted(own)}}, f)

atexit.register(dump)
sys.argv = ["bridge", "console", "--config", {config!r}]
runpy.run_module("bridge", run_name="__main__", alter_sys=True)
"""


def test_a_console_start_imports_only_the_named_packages_and_probes_agy_once(
    tmp_path: Path,
) -> None:
    agy = tmp_path / "agy"
    agy.write_text(PROBE_LOG.format(python=sys.executable))
    agy.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(
        '[bridge]\ndata_dir = "data"\n[approvals]\nmode = "off"\n'
        f'[agy]\ncommand = ["{agy}"]\nisolation = "none"\npass_env = ["AGY_SIM_HOME"]\n'
    )
    calls, out = tmp_path / "calls", tmp_path / "modules.json"
    env = {
        **os.environ,
        "AGY_SIM_HOME": str(signed_in(tmp_path / "home")),
        "AGY_CALLS": str(calls),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", DUMP_AT_EXIT.format(out=str(out), config=str(config))],
        cwd=tmp_path,
        env=env,
        input="",  # the person is done at once: the start, the banner, an orderly end
        capture_output=True,
        text=True,
        timeout=WALL,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(out.read_text())
    third = {name for name in found["third"] if not name.startswith("_")}
    assert third <= CONSOLE_PACKAGES, f"new at a console start: {sorted(third - CONSOLE_PACKAGES)}"
    own = found["own"]
    assert len(own) <= CONSOLE_BRIDGE_MODULES_AT_MOST, f"{len(own)} bridge modules: {own}"
    unwanted = [m for m in own if any(m == p or m.startswith(p + ".") for p in NOT_IN_A_CONSOLE)]
    assert unwanted == []
    assert sorted(calls.read_text().splitlines()) == ["--help", "--version"]


# --- every deferred import resolves --------------------------------------------------------


def deferred_imports() -> list[tuple[str, str, str | None]]:
    """Every import inside a function of ``bridge/`` (a deferred one: what a start leaves for
    later), as (where, module, name imported from it or None)."""
    found: list[tuple[str, str, str | None]] = []
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        relative = path.relative_to(ROOT)
        package = list(relative.with_suffix("").parts[:-1])
        for node in ast.walk(parse(path)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                # Named only for an import: formatting it for every node of every function
                # was most of this test's CPU (seconds).
                if isinstance(inner, ast.Import):
                    where = f"{relative}:{inner.lineno}"
                    found += [(where, alias.name, None) for alias in inner.names]
                elif isinstance(inner, ast.ImportFrom):
                    where = f"{relative}:{inner.lineno}"
                    base = inner.module or ""
                    if inner.level:
                        up = package[: len(package) - (inner.level - 1)]
                        base = ".".join([*up, base] if base else up)
                    found += [(where, base, alias.name) for alias in inner.names]
    return found


def test_every_deferred_import_in_the_bridge_resolves() -> None:
    # A start imports less when a part is imported where it is used (a chat's SDK, a forge's
    # client, rich on a terminal); a typo or a moved name there would only fail when that
    # path first runs. Each is imported here, as the code would.
    found = deferred_imports()
    assert len(found) > 40, "the walk found the deferred imports"
    broken = []
    for where, module, name in found:
        try:
            imported = importlib.import_module(module)
            if name is not None and not hasattr(imported, name):
                importlib.import_module(f"{module}.{name}")
        except ImportError as exc:
            broken.append(f"{where}: {module} {name or ''}: {exc}")
    assert broken == []


# --- what a Slack `run` start imports, named -----------------------------------------------

# The fault and instance tests start `python -m bridge run` with Slack about sixty times a run
# (and an operator at every restart). Parts such a start must not import: another chat, the
# forges' clients and webhooks without a [forge], the web console without [web], the doctor,
# the console's screen, the MCP SDK (a turn's first chat tool), PostgreSQL's driver on SQLite,
# the web console's ASGI framework (starlette, its SSE) without [web].
NOT_IN_A_SLACK_RUN = (
    "bridge.chat.matrix",
    "bridge.chat.console",
    "bridge.web",
    "bridge.forge.github",
    "bridge.forge.gitlab",
    "bridge.forge.webhooks",
    "bridge.core.forge_hooks",
    "bridge.doctor",
    "bridge.core.store.postgres",
)
NOT_IN_A_SLACK_RUN_PACKAGES = (
    "nio",
    "mcp",
    "mcp_types",
    "rich",
    "gidgethub",
    "psycopg",
    "psycopg_pool",
    "starlette",
    "sse_starlette",
)


def _dump_at_exit(out: Path, argv: list[str]) -> str:
    """A process that runs ``python -m bridge`` with ``argv`` and, at its orderly end, writes
    the packages (``third``) and bridge modules (``own``) it imported to ``out``."""
    code = DUMP_AT_EXIT.replace(
        'sys.argv = ["bridge", "console", "--config", {config!r}]', f"sys.argv = {argv!r}"
    )
    return code.format(out=str(out), config="")


@pytest.mark.anyio
async def test_a_slack_run_start_imports_no_other_chat_forge_web_console_nor_postgres(
    tmp_path: Path,
) -> None:
    port = free_port()
    out = tmp_path / "modules.json"
    simulator = [sys.executable, "-m", "bridge.simulator"]
    async with serve_fake_slack() as fake:
        config = tmp_path / "config.toml"
        config.write_text(
            '[bridge]\ndata_dir = "data"\n[approvals]\nmode = "off"\n'
            f'[agy]\ncommand = {json.dumps(simulator)}\nisolation = "none"\n'
            'pass_env = ["AGY_SIM_HOME"]\n'
            f'[slack]\napi_url = "{fake.api_url}"\n[admin]\nenabled = true\nport = {port}\n'
        )
        env = {
            **os.environ,
            "AGY_SIM_HOME": str(signed_in(tmp_path / "home")),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_APP_TOKEN": APP_TOKEN,
            "PYTHONPATH": str(ROOT),
        }
        argv = ["bridge", "run", "--config", str(config)]
        process = await anyio.open_process(
            [sys.executable, "-c", _dump_at_exit(out, argv)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            async with aiohttp.ClientSession() as http:
                with anyio.fail_after(WALL):
                    while True:
                        try:
                            async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                                if r.status == 200 and (await r.json())["adapters"] == ["slack"]:
                                    break
                        except aiohttp.ClientError:
                            pass
                        assert process.returncode is None, "the bridge exited at its start"
                        await anyio.sleep(0.1)
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(WALL / 2):
                assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    found = json.loads(out.read_text())
    own = found["own"]
    assert "bridge.chat.slack.adapter" in own and "bridge.admin" in own  # it did start
    unwanted = [m for m in own if any(m == p or m.startswith(p + ".") for p in NOT_IN_A_SLACK_RUN)]
    assert unwanted == []
    assert [p for p in NOT_IN_A_SLACK_RUN_PACKAGES if p in found["third"]] == []


# --- pydantic models built at their first use ----------------------------------------------

# pydantic builds a model's validator and serializer when its class is made, unless the model
# defers that to its first use (``defer_build``). A start imports these modules but may use
# few of their models (one turn on the console used 7 of their 35): the rest are never built.
# The config's models are not deferred (every start validates the config), nor agy's wire
# (its validators are taken at import, for the path of every streamed line).
DEFERRED_MODEL_MODULES = (
    "bridge.core.events",
    "bridge.core.store.rows",
    "bridge.core.store.pulls",
    "bridge.forge.base",
    "bridge.chat.slack.events",
    "bridge.chat.slack.changes",
    "bridge.chat.slack.context",
    "bridge.chat.slack.assistant",
    "bridge.chat.slack.titles",
    "bridge.chat.slack.messages_tab",
)


def test_the_models_a_start_may_not_use_are_built_at_their_first_use(stages: Stages) -> None:
    # Imported by bridge.cli, bridge.app and the Slack adapter (the staged interpreter's
    # "models" stage), then two of them used.
    found = stages["models"]
    assert found["models"] > 30 and found["built"] == []
    # Built at the first use, and working as any model.
    assert found["used"] == [True, True]
    assert found["dumped"] == {"platform": "slack", "channel": "C1", "thread": "1.2"}
    # A person's kind is left out of the dump (the model's own serializer, built with it).
    assert found["author"] == {"id": "U1", "display_name": "Ada", "email": None, "org": None}
