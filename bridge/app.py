"""Wiring: config -> store -> agy runtime -> core -> chat adapters; start and graceful stop."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from bridge.agy.capabilities import Capabilities, probe
from bridge.agy.launch import LaunchSettings
from bridge.agy.listener import Listener, open_listener
from bridge.agy.process import ProcessOpener, open_agy
from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core.core import Core, open_core
from bridge.core.events import ChatAdapter
from bridge.core.feedback import answer_feedback
from bridge.core.leases import open_leases
from bridge.core.store import Store, store_url
from bridge.core.stores import open_store
from bridge.core.tools import chat_tools_factory
from bridge.isolation import resolve_isolation, state_dirs
from bridge.leader import SINGLE_INSTANCE, run_as_leader
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

ADAPTER_START_TIMEOUT = 120.0
# Beside the sessions (so on their filesystem, where hard links work), inside the data directory
# (so hidden from every sandbox): the one copy of each plugin file many sessions hold alike.
SHARED_PLUGIN_FILES = "plugin-files"


def launch_settings(config: Config, command: list[str] | None = None) -> LaunchSettings:
    agy = config.agy
    return LaunchSettings(
        command=tuple(command or agy.command),
        skip_permissions=agy.skip_permissions,
        mode=agy.mode,
        sandbox=agy.sandbox,
        extra_args=tuple(agy.extra_args),
        env=dict(agy.env),
        git_name=config.identity.name,
        git_email=config.identity.email,
        turn_timeout=agy.turn_timeout,
        secret_env_names=tuple(config.secret_env_names()),
        secret_values=tuple(config.secret_values()),
        pass_env=tuple(agy.pass_env),
    )


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
) -> AsyncIterator[Bridge]:
    """Everything but the adapters' connections: yields once the core is ready."""
    data_dir = config.bridge.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = launch_settings(config, command)
    if caps is None:
        caps = await probe(settings.command, config.agy.help_timeout)
    # Raises IsolationError (naming the reason) when isolation = "bwrap" cannot work here.
    isolation = await resolve_isolation(config, settings.command)
    if not isolation.isolated:
        log.warning("⚠️ %s", isolation.warning())
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
            observe = getattr(adapter, "observe_retries", None)
            if observe is not None:
                observe(lambda reason, platform=name: metrics.chat_retry(platform, reason))
            # Feedback buttons under answers (Slack): a row per click in the store, a counter.
            observe_feedback = getattr(adapter, "observe_feedback", None)
            if observe_feedback is not None:
                observe_feedback(functools.partial(answer_feedback, store, metrics))
            # Matrix pins its allowed users' identities, and keeps verifications waiting for
            # the operator, in the store (issue 31).
            use_store = getattr(adapter, "use_trust_store", None)
            if use_store is not None:
                use_store(store)
        leases = open_leases(store, config.store.instance, config.store.lease_seconds)
        async with open_core(
            config,
            store,
            runtime,
            adapters,
            chat_tools_factory(config),
            metrics,
            leases,
            open_process=open_process,
        ) as core:
            yield Bridge(config, store, listener, runtime, core, adapters, metrics)


async def start_adapters(bridge: Bridge, tg: anyio.abc.TaskGroup) -> None:
    """Connect every adapter (each in the task group), then resume the inbox."""
    shared = bridge.core.cluster.shared
    for name, adapter in bridge.adapters.items():
        started = anyio.Event()
        if shared and name in SINGLE_INSTANCE:
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
