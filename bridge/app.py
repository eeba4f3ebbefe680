"""Wiring: config -> store -> agy runtime -> core -> chat adapters; start and graceful stop."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from bridge.agy.capabilities import Capabilities, probe
from bridge.agy.listener import Listener, open_listener
from bridge.agy.process import ProcessOpener, open_agy
from bridge.agy.runtime import CHAT_SERVER, AgyRuntime
from bridge.agy_launch import launch_settings
from bridge.config import Config
from bridge.core.capabilities import (
    CollectsFeedback,
    KeepsTrust,
    ObservesRetries,
    ServesHome,
    single_instance,
)
from bridge.core.core import Core, open_core
from bridge.core.events import ChatAdapter
from bridge.core.feedback import answer_feedback
from bridge.core.home import CoreHealth, HomeSources, StoreFacts
from bridge.core.home_sources import PersonSchedules, TeamUsage
from bridge.core.leases import open_leases
from bridge.core.schedules.clock import Clock
from bridge.core.store import Store, store_url
from bridge.core.store.opening import open_store
from bridge.core.thread.turn_policy import TurnPolicy
from bridge.core.thread.view import ThreadView
from bridge.isolation import resolve_isolation, resolve_limits, state_dirs
from bridge.leader import run_as_leader
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

ADAPTER_START_TIMEOUT = 120.0
# Beside the sessions (so on their filesystem, where hard links work), inside the data directory
# (so hidden from every sandbox): the one copy of each plugin file many sessions hold alike.
SHARED_PLUGIN_FILES = "plugin-files"


@dataclass
class Bridge:
    config: Config
    store: Store
    listener: Listener
    runtime: AgyRuntime
    core: Core
    adapters: dict[str, ChatAdapter]
    metrics: Metrics


@asynccontextmanager
async def open_bridge(
    config: Config,
    adapters: dict[str, ChatAdapter],
    *,
    command: list[str] | None = None,
    caps: Capabilities | None = None,
    open_process: ProcessOpener = open_agy,
    turn_policy: TurnPolicy | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[Bridge]:
    """Everything but the adapters' connections: yields once the core is ready
    (``turn_policy``: instead of the configuration's, :func:`policy_for`; ``clock``: the
    schedules', instead of the wall clock)."""
    data_dir = config.bridge.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = launch_settings(config, command)
    if caps is None:
        caps = await probe(settings.command, config.agy.probe_timeout)
    # Raises IsolationError (naming the reason) when isolation = "bwrap" cannot work here.
    isolation = await resolve_isolation(config, settings.command)
    if not isolation.isolated:
        log.warning("⚠️ %s", isolation.warning())
    elif not isolation.network.private:
        log.warning("⚠️ %s", isolation.network.describe())
    limits = await resolve_limits(config)
    log.info("%s", limits.describe())
    for gap in limits.gaps():
        log.warning("⚠️ %s", gap)
    async with open_store(store_url(config)) as store, open_listener() as listener:
        runtime = AgyRuntime(
            settings=settings,
            caps=caps,
            listener=listener,
            run_marker=uuid.uuid4().hex,
            init_timeout=config.agy.init_timeout,
            stop_grace=config.agy.stop_grace,
            max_line_bytes=config.agy.max_line_bytes,
            isolation=isolation,
            limits=limits,
            shared_files=data_dir / SHARED_PLUGIN_FILES,
            state_dirs=tuple(state_dirs(config, settings.command)),
        )
        # Before any thread starts: copies of guidance that has since changed.
        if removed := runtime.prune_shared_files():
            log.info("removed %d shared plugin file(s) no session uses", removed)
        # Before any thread starts: threads' agy state kept beside this instance's sessions
        # (the layout before) moves where every instance of the host finds it.
        if moved := await anyio.to_thread.run_sync(runtime.migrate_state, data_dir / "sessions"):
            log.info("moved %d thread(s)' agy state to where every instance finds it", moved)
        if config.store.shared_agy_state:
            log.warning(
                "[store] shared_agy_state is no longer used: every instance of this host finds "
                "a thread's agy state; set [agy] state_root for storage shared across hosts"
            )
        metrics = Metrics()
        for name, adapter in adapters.items():
            # The adapters' optional capabilities (bridge/core/capabilities.py), wired once.
            if isinstance(adapter, ObservesRetries):
                adapter.observe_retries(functools.partial(metrics.chat_retry, name))
            # Feedback buttons under answers (Slack): a row per click in the store, a counter.
            if isinstance(adapter, CollectsFeedback):
                adapter.observe_feedback(functools.partial(answer_feedback, store, metrics))
            # Matrix pins its allowed users' identities, and keeps verifications waiting for
            # the operator, in the store (issue 31).
            if isinstance(adapter, KeepsTrust):
                adapter.use_trust_store(store)
        leases = open_leases(store, config.store.instance, config.store.lease_seconds)
        async with open_core(
            config,
            store,
            runtime,
            adapters,
            chat_tools(config),
            metrics,
            leases,
            open_process=open_process,
            turn_policy=turn_policy,
            clock=clock,
        ) as core:
            # The Home tab (Slack): the core's facts about a person, the bridge's health for
            # admins, and usage and schedules where those features run.
            home = HomeSources(
                facts=StoreFacts(store, config.approvals.approvers),
                usage=TeamUsage(core.team) if core.team is not None else None,
                schedules=PersonSchedules(core.scheduler) if core.scheduler is not None else None,
                health=CoreHealth(store, core.slots),
            )
            for adapter in adapters.values():
                if isinstance(adapter, ServesHome):
                    adapter.serve_home(home)
            yield Bridge(config, store, listener, runtime, core, adapters, metrics)


async def start_adapters(bridge: Bridge, tg: anyio.abc.TaskGroup) -> None:
    """Connect every adapter (each in the task group), then resume the inbox."""
    shared = bridge.core.cluster.shared
    for name, adapter in bridge.adapters.items():
        started = anyio.Event()
        if shared and single_instance(adapter):
            tg.start_soon(
                run_as_leader,
                adapter,
                bridge.core,
                started.set,
                name,
                bridge.config.bridge.data_dir.resolve(),
                bridge.config.store.lease_seconds / 3,
                name=f"adapter {name} (leader)",
            )
        else:
            tg.start_soon(_run_adapter, adapter, bridge.core, started.set, name=f"adapter {name}")
        with anyio.fail_after(ADAPTER_START_TIMEOUT):
            await started.wait()
        log.info("%s adapter connected", name)
    await bridge.core.recover()


async def _run_adapter(adapter: ChatAdapter, core: Core, started: Callable[[], None]) -> None:
    await adapter.run(core, started)


def chat_adapters(config: Config) -> dict[str, ChatAdapter]:
    """The adapters the config enables (imported only when used)."""
    adapters: dict[str, ChatAdapter] = {}
    if config.slack.configured:
        from bridge.chat.slack.adapter import SlackAdapter

        adapters["slack"] = SlackAdapter(config.slack, data_dir=config.bridge.data_dir.resolve())
    if config.matrix.configured:
        from bridge.chat.matrix.adapter import MatrixAdapter

        adapters["matrix"] = MatrixAdapter(config.matrix, data_dir=config.bridge.data_dir.resolve())
    return adapters


def chat_tools(config: Config) -> Callable[[ThreadView], dict[str, Any]]:
    """Each thread's chat tools: an MCP server, made (and the MCP SDK imported) when agy first
    calls it. The SDK is about half of what the bridge imports, and most agy processes never
    call the chat tools: the listener starts a session's servers on their first request."""

    def make(worker: ThreadView) -> dict[str, Any]:
        def server() -> Any:
            from bridge.core.tools import chat_tools_factory

            return chat_tools_factory(config)(worker)[CHAT_SERVER]

        return {CHAT_SERVER: server}

    return make
