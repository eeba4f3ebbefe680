"""Everything needed to start agy sessions, shared by all sessions of one bridge process.

It joins the probed capabilities, the launch settings and the listener: ``prepare`` registers
a session with the listener and writes its plugin; ``spec`` builds the process to start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from bridge.agy import private_state, wire
from bridge.agy.capabilities import Capabilities
from bridge.agy.egress import proxy_env
from bridge.agy.launch import LaunchSettings, build_argv, build_env
from bridge.agy.limits import Enforcement, Limits, limits_line
from bridge.agy.listener import (
    Listener,
    answer_deadline,
    hook_command,
    tool_hook_command,
    tool_hook_timing,
    url_file_name,
    url_file_text,
)
from bridge.agy.network import BWRAP_ARGS as NETWORK_ARGS
from bridge.agy.network import SandboxNetwork
from bridge.agy.plugin import (
    gated_hook_command,
    pending_flag,
    plugin_dir,
    prune_shared,
    tool_hook_groups,
    write_plugin,
)
from bridge.agy.process import ProcessSpec
from bridge.agy.sandbox import Isolation, not_isolated, sandboxed_pid, state_layout, wrap
from bridge.agy.session import (
    AgySession,
    DecideFunc,
    InjectFunc,
    LostFunc,
    injection_hook,
    undelivered_injection,
)

# The hooks the bridge installs. PreInvocation is the injection point; it runs before every
# model call, so its timeout is short and the curl falls back to "{}" well before it.
HOOK_EVENTS = ("PreInvocation",)
HOOK_TIMEOUT_SECONDS = 10
CHAT_SERVER = "chat"


@dataclass(frozen=True)
class AgyRuntime:
    settings: LaunchSettings
    caps: Capabilities
    listener: Listener
    run_marker: str
    init_timeout: float = 90.0
    stop_grace: float = 5.0
    max_line_bytes: int = 8 * 1024 * 1024
    # Whether agy runs in a bubblewrap sandbox per thread (and if not, why not).
    isolation: Isolation = field(default_factory=lambda: not_isolated("isolation not set up"))
    # A private folder on the sessions' filesystem where the plugin files most sessions hold
    # alike are kept once and hard-linked into each session (None: each writes its own).
    shared_files: Path | None = None
    # How each agy process's caps are enforced (a cgroup each, rlimits, or none).
    limits: Enforcement = field(default_factory=lambda: Enforcement(Limits(), "off"))
    # agy's own state directories (where an unsandboxed agy keeps its conversations).
    state_dirs: tuple[Path, ...] = ()

    @cached_property
    def _environment(self) -> dict[str, str]:
        # Built from the bridge's environment once, at the first start: filtering a hundred
        # variables for secrets cost more than the rest of ``spec`` at every process start.
        return build_env(self.settings, os.environ, run_marker=self.run_marker)

    def prune_shared_files(self) -> int:
        """Remove shared plugin files no session links any more (at start: guidance that
        changed leaves its old copy behind). Returns how many went."""
        return prune_shared(self.shared_files) if self.shared_files is not None else 0

    def isolation_status(self) -> str:
        """Lines for a thread's ``!status`` and the banner: isolated (or loudly not), and
        which caps hold."""
        lines = [self.isolation.status_line(), limits_line(self.limits)]
        if self.isolation.isolated:
            lines.append(self.isolation.network.status_line())
        return "\n".join(lines)

    async def prepare(
        self,
        session_dir: Path,
        *,
        inject: InjectFunc,
        mcp_servers: Mapping[str, Any] | None = None,
        guidance: str,
        notes: str,
        decide: DecideFunc | None = None,
        approval_timeout: float = 0.0,
        lost: LostFunc | None = None,
    ) -> AgySession:
        """Register the session with the listener and write its plugin folder.

        ``inject(conversation_id)`` answers each ``PreInvocation`` call with the messages to hand
        over; ``lost()`` hears when such an answer cannot have been read by agy (it came after
        the listener's deadline, or curl had gone), so those messages go back to the inbox.
        With ``decide``, every tool call first asks it through agy's ``PreToolUse`` hook
        (matcher ``*``), whose deadlines sit above ``approval_timeout`` (the longest a person
        may take to decide). Without it no tool call is gated.
        Raises RuleTooLarge (and closes the registration) when the rules are too long.
        """
        session_dir.mkdir(parents=True, exist_ok=True)
        answer_within = {event: answer_deadline(HOOK_TIMEOUT_SECONDS) for event in HOOK_EVENTS}
        timing = tool_hook_timing(approval_timeout)
        if decide is not None:
            answer_within[wire.PRE_TOOL_USE] = timing.answer_within
        registration = await self.listener.register(
            injection_hook(inject, decide),
            dict(mcp_servers or {}),
            answer_within=answer_within,
            on_undelivered=undelivered_injection(lost) if lost is not None else None,
        )
        # Each hook's URL (token included) in a file of the plugin folder, never in argv.
        folder = plugin_dir(session_dir.resolve())
        events = [*HOOK_EVENTS, *([wire.PRE_TOOL_USE] if decide is not None else [])]

        def url_file(event: str) -> Path:
            return folder / url_file_name(event)

        try:
            write_plugin(
                session_dir,
                guidance=guidance,
                notes=notes,
                hook_commands={
                    event: gated_hook_command(
                        pending_flag(session_dir.resolve()),
                        hook_command(url_file(event), HOOK_TIMEOUT_SECONDS),
                    )
                    for event in HOOK_EVENTS
                },
                hook_timeout=HOOK_TIMEOUT_SECONDS,
                mcp_servers={name: registration.mcp_url(name) for name in mcp_servers or {}},
                # Every tool, so a tool agy adds later is gated too; the policy lets the
                # harmless ones through at once.
                pre_tool_use=tool_hook_groups(
                    tool_hook_command(url_file(wire.PRE_TOOL_USE), timing.hook_timeout),
                    timing.hook_timeout,
                )
                if decide is not None
                else (),
                shared=self.shared_files,
                url_files={
                    url_file_name(event): url_file_text(registration.hook_url(event))
                    for event in events
                },
            )
        except BaseException:
            await registration.close()
            raise
        return AgySession(session_dir, registration)

    def spec(
        self,
        session_dir: Path,
        workdir: Path,
        *,
        model: str | None,
        conversation: str | None,
        environ: Mapping[str, str] | None = None,
        repo: Path | None = None,
    ) -> ProcessSpec:
        argv = build_argv(
            self.settings,
            self.caps,
            session_dir=session_dir.resolve(),
            model=model,
            conversation=conversation,
        )
        env = (
            dict(self._environment)
            if environ is None
            else build_env(self.settings, environ, run_marker=self.run_marker)
        )
        sandbox = self.isolation.sandbox
        confine = self.limits.open if self.limits.mechanism != "off" else None
        if sandbox is None:
            return ProcessSpec(
                argv=argv,
                env=env,
                cwd=workdir,
                init_timeout=self.init_timeout,
                stop_grace=self.stop_grace,
                max_line_bytes=self.max_line_bytes,
                confine=confine,
            )
        private = self.isolation.network.private
        if private and self.isolation.network.proxy is not None:
            env.update(proxy_env())  # the only way out: the bridge's egress proxy
        if "TMPDIR" in env:
            env["TMPDIR"] = "/tmp"  # the sandbox's private /tmp; the host's is not there
        # The home is read-only there: tools that cache (pip, npm, uv) cache in the private /tmp.
        env.setdefault("XDG_CACHE_HOME", "/tmp/.cache")
        layout = state_layout(sandbox)
        return ProcessSpec(
            argv=wrap(
                sandbox,
                argv,
                workdir=workdir,
                session_dir=session_dir,
                conversation=conversation,
                repo=repo,
                network=NETWORK_ARGS if private else (),
            ),
            env=env,
            cwd=workdir,
            init_timeout=self.init_timeout,
            stop_grace=self.stop_grace,
            max_line_bytes=self.max_line_bytes,
            signal_pid=sandboxed_pid,
            confine=confine,
            network=self._sandbox_network if private else None,
            locks=tuple(private_state.lock_paths(layout, session_dir.resolve())),
            sweep=self.limits.sweep if self.limits.parents else None,
        )

    def _sandbox_network(self) -> SandboxNetwork:
        return self.isolation.network.setup(self.listener.port, self.listener.serving)

    def conversation_reachable(self, session_dir: Path, conversation: str) -> bool:
        """Whether agy started here can resume the thread's ``conversation`` (its state is in
        reach: the thread's private state, or agy's own directories without a sandbox).
        Blocking (it looks at files): run it off the event loop."""
        sandbox = self.isolation.sandbox
        if sandbox is None:
            return private_state.shared_has_conversation(self.state_dirs, conversation)
        layout = state_layout(sandbox)
        return private_state.conversation_reachable(layout, session_dir.resolve(), conversation)

    def migrate_state(self, sessions: Path) -> int:
        """At start: private agy state an earlier layout kept among ``sessions``, moved to
        where every instance finds it. Blocking: run it off the event loop."""
        sandbox = self.isolation.sandbox
        return private_state.migrate(state_layout(sandbox), sessions) if sandbox else 0
