"""``agy-bridge doctor``: is this machine ready to run the bridge?

Each check prints one line; the exit status is non-zero when any check failed. ``--live`` also
runs one short real turn in a scratch session and reports what only a real agy build can show:
whether ``init`` came, whether our ``PreInvocation`` hook reached the listener, and whether agy
contacted our MCP server (the proof that this build loads the session directory as a plugin).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from bridge.agy import wire
from bridge.agy.capabilities import Capabilities, probe
from bridge.agy.launch import build_env, held_back, login_env_held_back
from bridge.agy.listener import hook_command, open_listener, url_file_name, url_file_text
from bridge.agy.network import loopback_nameservers
from bridge.agy.plugin import plugin_dir
from bridge.agy.process import AgyStartError, ProcessExit, open_agy
from bridge.agy.runtime import CHAT_SERVER, AgyRuntime
from bridge.agy.sandbox import Isolation, not_isolated, state_layout, wrap
from bridge.agy.session import ToolCall, ToolVerdict
from bridge.agy_launch import launch_settings
from bridge.config import Config
from bridge.core import disk as disk_usage
from bridge.core.approvals.step_match import Seen, StepLedger, ToolStep, gated_step
from bridge.core.pulls import has_forge
from bridge.core.store import store_url
from bridge.core.store.opening import open_store
from bridge.isolation import IsolationError, executables, resolve_isolation, resolve_limits

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

LIVE_TURN_SECONDS = 180.0
LIVE_PROMPT = (
    "This is agy-bridge's self-test. Call the tool `ping` of the MCP server `bridge_chat` once "
    "(it takes no arguments), then answer with the single word: ok"
)
# The second live turn asks agy to run a harmless command, which the bridge refuses through
# the PreToolUse hook: agy must not run it and must say it was denied.
DENY_PROMPT = (
    "This is agy-bridge's approval self-test. Run this exact shell command with your command "
    "tool: {command}\nThen say in one sentence what happened."
)
DENY_REASON = "agy-bridge doctor refuses this command on purpose (approval self-test)"


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    failed: int = 0

    def ok(self, text: str) -> None:
        self.lines.append(f"✓ {text}")
        print(f"✓ {text}", flush=True)

    def bad(self, text: str) -> None:
        self.failed += 1
        self.lines.append(f"✗ {text}")
        print(f"✗ {text}", flush=True)

    def info(self, text: str) -> None:
        print(f"  {text}", flush=True)

    def warn(self, text: str) -> None:
        """Loud, but not a failure: the bridge runs this way (for example without isolation)."""
        self.lines.append(f"⚠ {text}")
        print(f"⚠ {text}", flush=True)


async def _output(argv: Sequence[str], seconds: float) -> tuple[int | None, str]:
    try:
        with anyio.fail_after(seconds):
            done = await anyio.run_process(list(argv), check=False)
    except TimeoutError:
        return None, f"no answer within {seconds:g} s"
    except OSError as exc:
        return None, str(exc)
    text = (done.stdout + done.stderr).decode("utf-8", "replace").strip()
    return done.returncode, text


async def check_agy(config: Config, report: Report, command: list[str]) -> Capabilities:
    where = shutil.which(command[0]) or (command[0] if Path(command[0]).is_file() else None)
    if where is None:
        report.bad(
            f"agy not found ({command[0]!r}): install the Antigravity CLI, or set [agy] command"
        )
        return Capabilities()
    report.ok(f"agy found: {where}")
    caps = await probe(command, config.agy.probe_timeout)
    if caps.probed:
        report.ok(f"agy version: {caps.version or 'unknown'}")
        report.info("advertised flags: " + ", ".join(sorted(caps.flags)))
        if caps.missing_essential:
            missing = ", ".join(caps.missing_essential)
            report.bad(f"agy --help lacks flags the bridge needs: {missing}")
        if not caps.has("--print-timeout"):
            report.info("no --print-timeout: agy cannot report its own timeout before ours")
    else:
        report.bad(f"agy --help failed ({caps.problem}); only the essential flags would be sent")
    code, text = await _output([*command, "models"], max(config.agy.probe_timeout, 10))
    if code == 0:
        report.ok("agy is signed in (`agy models` answers)")
    else:
        first = text.splitlines()[0] if text else "no output"
        report.bad(
            f"agy is not ready: `agy models` says {first!r}. Sign in once by running `agy` "
            "as the user the bridge runs as"
        )
    return caps


def check_curl(report: Report) -> None:
    curl = shutil.which("curl")
    if curl:
        report.ok(f"curl found: {curl} (agy's hooks use it)")
    else:
        report.bad("curl not found: agy's hooks need it to reach the bridge (install curl)")


async def check_data_dir(config: Config, report: Report) -> None:
    data_dir = config.bridge.data_dir.resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".doctor-") as handle:
            handle.write(b"ok")
            handle.flush()
        async with open_store(store_url(config)) as store:
            where = store.database.where
    except Exception as exc:
        report.bad(f"data directory {data_dir} is not usable: {exc}")
        return
    report.ok(f"data directory {data_dir} is writable and the store opens ({where})")


async def check_listener(report: Report) -> None:
    async def hook(event: str, data: wire.HookInput) -> wire.HookReply:
        return wire.HookReply(inject_steps=[wire.InjectedStep(user_message="doctor")])

    try:
        async with open_listener() as listener:
            registration = await listener.register(hook)
            with tempfile.TemporaryDirectory(prefix="agy-bridge-doctor-") as folder:
                url_file = _url_file(Path(folder), registration.hook_url("PreInvocation"))
                command = hook_command(url_file, 10)
                code, text = await _shell(command, b'{"conversationId":"doctor"}')
            await registration.close()
    except OSError as exc:
        report.bad(f"the loopback listener cannot bind: {exc}")
        return
    if code == 0 and "doctor" in text:
        report.ok(f"listener on 127.0.0.1:{listener.port} answered a hook call made with curl")
    else:
        report.bad(f"a hook call through curl did not reach the listener: {text or code}")


def _url_file(folder: Path, url: str) -> Path:
    """The curl config file a hook command reads its URL (with the token) from."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / url_file_name("PreInvocation")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(url_file_text(url))
    return path


async def _shell(command: str, stdin: bytes) -> tuple[int | None, str]:
    try:
        with anyio.fail_after(15):
            done = await anyio.run_process(["sh", "-c", command], input=stdin, check=False)
    except (TimeoutError, OSError) as exc:
        return None, str(exc)
    return done.returncode, done.stdout.decode("utf-8", "replace")


async def check_isolation(config: Config, report: Report, command: list[str]) -> Isolation:
    """Whether threads run sandboxed; if they do, a probe inside a real thread-like sandbox."""
    try:
        isolation = await resolve_isolation(config, command)
    except IsolationError as exc:
        report.bad(f"the bridge will refuse to start: {exc}")
        return not_isolated(str(exc))
    if not isolation.isolated:
        report.warn(isolation.warning())
        return isolation
    assert isolation.sandbox is not None
    report.ok(f"each thread's agy runs in its own bubblewrap sandbox ({isolation.sandbox.bwrap})")
    await _probe_sandbox(config, report, isolation, command)
    return isolation


async def check_limits(config: Config, report: Report, isolation: Isolation) -> None:
    """Which caps hold per thread and how, what the fallback misses, and the network."""
    limits = await resolve_limits(config)
    if limits.mechanism in ("cgroup1", "cgroup2"):
        report.ok(limits.describe())
    else:
        report.warn(limits.describe())
    for gap in limits.gaps():
        report.warn(gap)
    if isolation.isolated:
        if isolation.network.private:
            report.ok(isolation.network.describe())
            if isolation.network.proxy is None and (servers := loopback_nameservers()):
                report.warn(
                    f"the host's DNS resolver ({', '.join(servers)}) is on its own loopback, "
                    "which a sandbox's network cannot reach: name lookups in threads fail. "
                    "Point /etc/resolv.conf at a resolver elsewhere, or set [agy] egress"
                )
        else:
            report.warn(isolation.network.describe())


def check_disk(config: Config, report: Report) -> None:
    """Where the store and the workspaces live: a workspace that fills its filesystem must not
    fill the store's."""
    data_dir = config.bridge.data_dir.resolve()
    places = {"the default workspaces": data_dir / "workspaces"}
    for workspace in config.workspaces:
        places[f"the workspace {workspace.path}"] = workspace.path.expanduser().resolve()
    store = disk_usage.filesystem(data_dir)
    if store is None:
        return
    report.info(f"the store is in {data_dir}: {disk_usage.describe(store)}")
    for name, path in places.items():
        found = disk_usage.filesystem(path)
        if found is None:
            continue
        if found.device == store.device:
            floor = disk_usage.size_words(int(config.agy.min_free_bytes))
            report.info(
                f"{name} share that filesystem: an agent that fills it is stopped at the "
                f"free-space floor ({floor}), and the store keeps a reserve below it"
            )
        else:
            report.info(f"{name}: another filesystem ({disk_usage.describe(found)})")


# Each check prints one word when it holds; the doctor reads the words back.
SANDBOX_PROBE = """
touch "$PWD/.doctor-write" 2>/dev/null && echo WRITABLE
[ -e "$STORE" ] || echo NO_STORE
[ -z "$CONFIG" ] || [ ! -e "$CONFIG" ] && echo NO_CONFIG
for entry in $(ls -A "$DATA" 2>/dev/null); do echo "DATA_ENTRY $entry"; done
printf '{"conversationId":"doctor"}' | { HOOK; } | grep -q doctor && echo LISTENER
[ -z "$AGY" ] || [ -x "$AGY" ] && echo AGY_VISIBLE
touch /.doctor-write 2>/dev/null || echo ROOT_READ_ONLY
touch "$HOME/.doctor-write" 2>/dev/null || echo HOME_READ_ONLY
touch /tmp/.doctor-write 2>/dev/null && echo TMP_WRITABLE
"""


async def _probe_sandbox(
    config: Config, report: Report, isolation: Isolation, command: list[str]
) -> None:
    assert isolation.sandbox is not None
    data_dir = config.bridge.data_dir.resolve()
    scratch = data_dir / "doctor" / uuid.uuid4().hex[:8]
    workdir, session = scratch / "work", scratch / "session"
    workdir.mkdir(parents=True, exist_ok=True)
    session.mkdir(parents=True, exist_ok=True)

    async def hook(event: str, data: wire.HookInput) -> wire.HookReply:
        return wire.HookReply(inject_steps=[wire.InjectedStep(user_message="doctor")])

    config_file = str(config.source) if config.source is not None else ""
    try:
        async with open_listener() as listener:
            registration = await listener.register(hook)
            # Where a thread's hooks find their URL: its read-only plugin folder.
            url_file = _url_file(
                plugin_dir(session.resolve()), registration.hook_url("PreInvocation")
            )
            script = SANDBOX_PROBE.replace("HOOK", hook_command(url_file, 10))
            argv = wrap(
                isolation.sandbox, ["sh", "-c", script], workdir=workdir, session_dir=session
            )
            env = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "STORE": str(data_dir / "bridge.sqlite3"),
                "CONFIG": config_file,
                "DATA": str(data_dir),
                # agy's own executable, as a thread's sandbox must show it.
                "AGY": next((str(path) for path in executables(command)), ""),
                "HOME": str(Path.home()),
            }
            try:
                with anyio.fail_after(30):
                    done = await anyio.run_process(argv, env=env, cwd=workdir, check=False)
            except (TimeoutError, OSError) as exc:
                report.bad(f"the sandbox probe did not run: {exc}")
                return
            finally:
                await registration.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    said = done.stdout.decode("utf-8", "replace").split("\n")
    if done.returncode != 0 and not said[0]:
        detail = done.stderr.decode("utf-8", "replace").strip()
        report.bad(f"the sandbox probe failed to start: {detail or done.returncode}")
        return
    checks = [
        ("WRITABLE" in said, "the thread's workspace is writable inside the sandbox"),
        ("NO_STORE" in said, "the bridge's store is not visible inside the sandbox"),
        ("NO_CONFIG" in said, "the config file is not visible inside the sandbox"),
        ("LISTENER" in said, "the listener is reachable from inside the sandbox (hook via curl)"),
        ("AGY_VISIBLE" in said, "agy's executable is visible inside the sandbox"),
        ("ROOT_READ_ONLY" in said, "the sandbox's root is read-only"),
        ("HOME_READ_ONLY" in said, "the home directory is read-only inside the sandbox"),
        ("TMP_WRITABLE" in said, "the sandbox's private /tmp is writable"),
    ]
    entries = sorted(line.split(" ", 1)[1] for line in said if line.startswith("DATA_ENTRY "))
    others = [entry for entry in entries if entry != "doctor"]
    checks.append(
        (
            not others,
            "the data directory shows nothing but the thread's own folders"
            + (f" (also visible: {', '.join(others)})" if others else ""),
        )
    )
    for good, text in checks:
        if good:
            report.ok(text)
        else:
            report.bad(f"NOT so: {text}")


# agy's login as a thread sees it: ``agy models`` inside a thread's sandbox, and each login
# entry there read-only. The words come back on stdout, as for the sandbox probe.
LOGIN_PROBE = """
"$@" models >/dev/null 2>"$TMPDIR/models.err" && echo SIGNED_IN || sed -n 1p "$TMPDIR/models.err"
for entry in $ENTRIES; do
  [ -e "$entry" ] || continue
  if [ -w "$entry" ]; then echo "WRITABLE $entry"; else echo "READONLY $entry"; fi
done
"""


async def check_thread_login(config: Config, report: Report, isolation: Isolation) -> None:
    """agy's login as a thread sees it: the shared login entries, read-only in its sandbox."""
    sandbox = isolation.sandbox
    if sandbox is None:
        return
    command = list(config.agy.command)
    layout = state_layout(sandbox)
    found = [shared / e for shared in layout.shared for e in layout.login_entries]
    present = [str(path) for path in found if path.exists()]
    if present:
        report.ok("agy's login in its state directories: " + ", ".join(present))
    else:
        report.bad(
            "none of [agy] login_entries is in agy's state directories "
            f"({', '.join(str(s) for s in layout.shared)}): sign agy in as the bridge's user "
            "(where no keyring runs agy keeps its login in a file), or set login_entries"
        )
    scratch = config.bridge.data_dir.resolve() / "doctor" / uuid.uuid4().hex[:8]
    workdir, session = scratch / "work", scratch / "session"
    workdir.mkdir(parents=True, exist_ok=True)
    session.mkdir(parents=True, exist_ok=True)
    env = build_env(launch_settings(config, command), os.environ, run_marker=uuid.uuid4().hex)
    env.update(TMPDIR="/tmp", ENTRIES=" ".join(str(path) for path in found))
    argv = wrap(
        sandbox, ["sh", "-c", LOGIN_PROBE, "sh", *command], workdir=workdir, session_dir=session
    )
    try:
        with anyio.fail_after(max(config.agy.probe_timeout, 10) + 20):
            done = await anyio.run_process(argv, env=env, cwd=workdir, check=False)
    except (TimeoutError, OSError) as exc:
        report.bad(f"the login probe in a thread's sandbox did not run: {exc}")
        return
    finally:
        for shared in layout.shared:
            shutil.rmtree(layout.private_dir(shared, session.resolve()), ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    said = done.stdout.decode("utf-8", "replace").splitlines()
    if "SIGNED_IN" in said:
        report.ok("agy is signed in inside a thread's sandbox (`agy models` answers there)")
    else:
        first = said[0] if said else "no output"
        report.bad(
            f"agy is NOT signed in inside a thread's sandbox: `agy models` says {first!r}. "
            "Threads see only [agy] login_entries of agy's state: list there the files of "
            "agy's login"
        )
    writable = [line.split(" ", 1)[1] for line in said if line.startswith("WRITABLE ")]
    if writable:
        report.bad("a thread could rewrite agy's login: " + ", ".join(writable))
    elif any(line.startswith("READONLY ") for line in said):
        report.ok("agy's login is read-only inside a thread's sandbox")


def check_environment(config: Config, report: Report, environ: Mapping[str, str]) -> None:
    """What of the bridge's environment agy does not get (names only), and which of those
    agy's own login may need."""
    settings = launch_settings(config)
    kept = held_back(settings, environ)
    if kept:
        report.info(
            f"held back from agy ({len(kept)} variables, by the allow-list): {', '.join(kept)}"
        )
    for name in login_env_held_back(settings, environ):
        report.warn(
            f"{name} is set but held back from agy; if agy's login or network needs it, add "
            f'it to [agy] pass_env = ["{name}"]'
        )


def check_chats(config: Config, report: Report) -> None:
    chats = []
    if config.slack.configured:
        mode = config.slack.transport
        needed = config.slack.app_token if mode == "socket" else config.slack.signing_secret
        if needed is None:
            what = "app_token" if mode == "socket" else "signing_secret"
            report.bad(f"Slack {mode} mode needs [slack] {what} (or its environment variable)")
        chats.append(f"Slack ({mode} mode)")
        check_slack_sessions(config, report)
    if config.matrix.configured:
        if config.matrix.password is None and config.matrix.access_token is None:
            report.bad("Matrix needs [matrix] password or access_token")
        chats.append(f"Matrix ({config.matrix.user_id})")
        # The file the adapter left, read without matrix-nio (a second of CPU to import).
        from bridge.chat.matrix.files import MatrixFiles

        reset = MatrixFiles.under(config.bridge.data_dir).pending_reset_url()
        if reset is not None:
            report.bad(
                "Matrix: replacing the bot's cross-signing identity waits for approval in the "
                f"account management (MAS): open {reset} signed in as {config.matrix.user_id}, "
                "approve the reset, then restart the bridge (until then the bot cannot read "
                "encrypted rooms)"
            )
    if chats:
        report.ok("chat platforms configured: " + ", ".join(chats))
    else:
        report.info("no chat platform configured: `agy-bridge console` still works")


def check_slack_sessions(config: Config, report: Report) -> None:
    """What the bridge last learnt from Slack's answer about agent sessions (it never guesses:
    only a running bridge's first ``agents.sessions.setStatus`` tells)."""
    # What the adapter wrote, read without Slack's SDK and aiohttp (0.2 s of CPU to import).
    from bridge.chat.slack.session_record import recorded_support

    seen = recorded_support(config.bridge.data_dir.resolve())
    if seen is None:
        report.info("Slack agent sessions: not known yet (the first turn asks Slack)")
        return
    state, reason, _ = seen
    if state == "available":
        report.ok("Slack agent sessions: available (Slack's own status and stop button)")
    else:
        report.warn(
            f"Slack agent sessions: unavailable ({reason}); the bridge shows its own status "
            "line and Stop message. Declare the app as an agent (agent_view) to change that"
        )


async def check_matrix_identities(config: Config, report: Report) -> None:
    """With ``[matrix] trust = "cross-signed"``, allowed users without a cross-signing
    identity command nothing in encrypted rooms: name them (issue 31)."""
    matrix = config.matrix
    if not matrix.configured or not matrix.encryption or matrix.trust != "cross-signed":
        return
    from bridge.chat.matrix.operator import allowed_without_identity

    missing, why_not = await allowed_without_identity(config)
    if why_not:
        report.info(f"Matrix: allowed users' identities not checked: {why_not}")
    elif missing:
        report.warn(
            "Matrix: allowed users without a cross-signing identity (in encrypted rooms the "
            "bot obeys none of their devices until they set one up; docs/matrix.md, Trust): "
            + ", ".join(missing)
        )
    else:
        report.ok("Matrix: every allowed user has a cross-signing identity")


@dataclass
class LiveSeen:
    hooks: list[str] = field(default_factory=list)
    mcp_calls: list[str] = field(default_factory=list)
    tool_hooks: list[str] = field(default_factory=list)  # PreToolUse calls, by tool name
    # When the first hook call and the first tool's hook call came (time.monotonic()).
    first_hook: float | None = None
    first_tool: float | None = None
    # PreToolUse calls matched to the stream's tool steps (core/approvals/step_match).
    ledger: StepLedger = field(default_factory=StepLedger)
    steps: list[ToolStep] = field(default_factory=list)


def _live_mcp_server(seen: LiveSeen) -> Server[Any]:
    # The MCP SDK only for --live (it is about half of what the bridge imports).
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        seen.mcp_calls.append("tools/list")
        tool = types.Tool(
            name="ping",
            description="agy-bridge self-test: answers pong",
            input_schema={"type": "object", "properties": {}},
        )
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        seen.mcp_calls.append(f"tools/call {params.name}")
        return types.CallToolResult(content=[types.TextContent(text="pong")])

    return Server("agy-bridge doctor", on_list_tools=list_tools, on_call_tool=call_tool)


async def live_turn(
    config: Config,
    report: Report,
    command: list[str],
    caps: Capabilities,
    isolation: Isolation | None = None,
) -> None:
    seen = LiveSeen()

    async def inject(conversation_id: str) -> list[str]:
        seen.hooks.append("PreInvocation")
        seen.first_hook = seen.first_hook or time.monotonic()
        return []

    async def decide(call: ToolCall) -> ToolVerdict:
        seen.tool_hooks.append(call.name)
        seen.ledger.decided(call.name, call.step_idx)
        seen.first_tool = seen.first_tool or time.monotonic()
        if call.name == "run_command":
            return ToolVerdict(allow=False, reason=DENY_REASON)
        return ToolVerdict(allow=True)

    scratch = config.bridge.data_dir.resolve() / "doctor" / uuid.uuid4().hex[:8]
    workdir = scratch / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    marker = workdir / "doctor-approval-ran"
    harmless = f"touch {marker.name}"
    prompt = LIVE_PROMPT
    deny_prompt = DENY_PROMPT.format(command=harmless)
    from bridge.chat.console.adapter import simulator_command  # (rich: the console only)

    if command == simulator_command():
        prompt += f" [[mcp bridge_{CHAT_SERVER} ping {{}}]]"  # the simulator follows scripts only
        deny_prompt += f" [[tool run_command {harmless}]]"
    denial = _Denial()
    try:
        async with open_listener() as listener:
            runtime = AgyRuntime(
                settings=launch_settings(config, command),
                caps=caps,
                listener=listener,
                run_marker=uuid.uuid4().hex,
                init_timeout=config.agy.init_timeout,
                stop_grace=config.agy.stop_grace,
                isolation=isolation or not_isolated("doctor"),
            )
            if runtime.isolation.isolated:
                report.info("the live turn runs inside the thread sandbox, as the bridge runs it")
            session = await runtime.prepare(
                scratch / "session",
                inject=inject,
                mcp_servers={CHAT_SERVER: _live_mcp_server(seen)},
                guidance="agy-bridge doctor: a self-test session.",
                notes="",
                decide=decide,
                approval_timeout=30,
            )
            # The hook calls the bridge only while something waits: make it call now.
            session.mark_pending()
            spec = runtime.spec(
                session.directory, workdir, model=config.agy.model or None, conversation=None
            )
            try:
                await _live_process(spec, [prompt, deny_prompt], report, denial, seen)
            finally:
                await session.close()
        ran = marker.exists()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if seen.hooks:
        report.ok(f"the PreInvocation hook reached the bridge ({len(seen.hooks)} call(s))")
    else:
        report.bad(
            "the PreInvocation hook never reached the bridge: this agy build did not load the "
            "plugin's hooks.json (mid-turn messages would wait for the next turn)"
        )
    report_hooks_first(report, seen, config.approvals.hook_proof_seconds)
    report_steps_decided(report, seen)
    if seen.mcp_calls:
        report.ok("agy contacted the bridge's MCP server (" + ", ".join(seen.mcp_calls) + ")")
    else:
        report.bad(
            "agy never contacted the bridge's MCP server: the chat tools (post_message, "
            "post_file, thread_history) will not be available to the agent"
        )
    _report_denial(report, seen, denial, ran)


def report_hooks_first(report: Report, seen: LiveSeen, seconds: float) -> None:
    """One line: whether the hooks ran before the turn's first tool (the bridge stops an agy
    whose turn reaches it through no hook within ``seconds``)."""
    if seen.first_hook is not None and (
        seen.first_tool is None or seen.first_hook <= seen.first_tool
    ):
        report.ok(
            "the hooks ran before the turn's first tool (the bridge stops an agy that runs "
            f"none within {seconds:g} s of a turn's start)"
        )
    else:
        report.bad(
            "no hook ran before the turn's first tool: with approvals on, the bridge stops this "
            "agy at every turn (its tool calls would run unasked)"
        )


def report_steps_decided(report: Report, seen: LiveSeen) -> None:
    """One line: whether each tool call agy's stream showed had its PreToolUse call (a build
    may run PreInvocation and skip PreToolUse; the bridge stops such an agy)."""
    ran = [step for step in seen.steps if seen.ledger.seen(step) is Seen.BYPASSED]
    if ran:
        named = ", ".join(f"{step.name} step {step.index}" for step in ran)
        report.bad(
            f"agy ran {len(ran)} tool call(s) the PreToolUse hook never decided ({named}; "
            "matched by the stream's step index): with approvals on, the bridge stops this agy "
            "at such a call and holds the thread"
        )
    else:
        done = sum(step.state == "DONE" for step in seen.steps)
        report.ok(
            f"every tool call of agy's stream was decided by the PreToolUse hook ({done} ran)"
        )


@dataclass
class _Denial:
    """What the approval turn showed: the refused step, and the answer."""

    step_error: str | None = None
    response: str = ""


def _report_denial(report: Report, seen: LiveSeen, denial: _Denial, ran: bool) -> None:
    if "run_command" not in seen.tool_hooks:
        report.bad(
            "the PreToolUse hook never asked the bridge about run_command: approvals cannot "
            'work with this agy build (set [approvals] mode = "off" or upgrade agy)'
        )
        return
    report.ok("the PreToolUse hook asked the bridge before run_command")
    if ran:
        report.bad(
            "agy RAN a command the bridge denied: this agy build does not honour the "
            "PreToolUse decision, so approvals would not protect anything"
        )
        return
    report.ok("the denied command did not run")
    if denial.step_error is not None and DENY_REASON in denial.step_error:
        report.ok(f"agy reported the denial: {denial.step_error[:120]!r}")
    else:
        report.bad(
            "agy did not report the denial in its tool step (the model may not learn why "
            "a command was refused)"
        )


async def _live_process(
    spec: Any, prompts: list[str], report: Report, denial: _Denial, seen: LiveSeen
) -> None:
    """Run the turns in one agy process; the last one is the approval self-test."""
    try:
        async with open_agy(spec, lambda reason: report.info(f"unreadable line: {reason}")) as proc:
            init = proc.init
            assert init is not None
            report.ok(
                f"init arrived: conversation {proc.conversation_id}"
                + (f", model {init.init.model}" if init.init.model else "")
            )
            for number, prompt in enumerate(prompts):
                last = number == len(prompts) - 1
                if not await _live_one_turn(proc, prompt, report, denial if last else None, seen):
                    return
    except AgyStartError as exc:
        report.bad(f"agy did not start: {exc.message}")


async def _live_one_turn(
    proc: Any, prompt: str, report: Report, denial: _Denial | None, seen: LiveSeen
) -> bool:
    """One turn; False when agy is gone or the turn did not end."""
    await proc.send_turn([prompt])
    with anyio.move_on_after(LIVE_TURN_SECONDS):
        while True:
            out = await proc.next()
            if isinstance(out, wire.StepUpdateEvent):
                tool = gated_step(out.step_update, proc.conversation_id)
                if tool is not None and tool.state != "ACTIVE":
                    seen.steps.append(tool)
            if isinstance(out, wire.StepUpdateEvent) and denial is not None:
                step = out.step_update
                info = step.tool_info
                if step.state == "ERROR" and info is not None and info.error is not None:
                    denial.step_error = info.error.message
            if isinstance(out, wire.ResultEvent):
                if denial is not None:
                    denial.response = out.result.response
                if out.result.ok:
                    report.ok(f"a turn completed: {out.result.response.strip()[:80]!r}")
                else:
                    report.bad(f"the turn failed, agy says: {out.result.error}")
                return True
            if isinstance(out, ProcessExit):
                report.bad(f"agy stopped during the turn ({out.describe()})")
                return False
    report.bad(f"the turn did not finish within {LIVE_TURN_SECONDS:g} s")
    return False


async def doctor(config: Config, live: bool) -> int:
    report = Report()
    command = list(config.agy.command)
    caps = await check_agy(config, report, command)
    check_curl(report)
    await check_data_dir(config, report)
    await check_listener(report)
    isolation = await check_isolation(config, report, command)
    await check_limits(config, report, isolation)
    check_disk(config, report)
    await check_thread_login(config, report, isolation)
    check_environment(config, report, os.environ)
    check_chats(config, report)
    await check_matrix_identities(config, report)
    if has_forge(config):
        # aiohttp and the forges' clients only when a forge is configured.
        from bridge.doctor_forge import check_forges

        await check_forges(config, report)
    if live:
        if report.failed:
            report.info("skipping the live turn until the problems above are fixed")
        else:
            await live_turn(config, report, command, caps, isolation)
    print(
        "\nall checks passed" if not report.failed else f"\n{report.failed} problem(s) found",
        file=sys.stdout,
    )
    return 1 if report.failed else 0
