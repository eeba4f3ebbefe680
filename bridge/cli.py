"""The ``agy-bridge`` command: ``run``, ``console``, ``doctor``, ``matrix trust`` and ``matrix
verify``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from bridge import __version__, audit_cli
from bridge.config import Config, ConfigError, load_config
from bridge.logs import setup_logging

# What each command needs is imported when it runs: a start imports for over a second of CPU
# (the MCP SDK, aiohttp, pydantic's models), and a config error, `doctor` or `audit` need
# little of it; the console's screen and the admin endpoint only where they are used.
if TYPE_CHECKING:
    from bridge.admin import PostHandler
    from bridge.app import Bridge
    from bridge.core.core import Core
    from bridge.core.events import ThreadRef

log = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agy-bridge", description="Chat threads as conversations of the Antigravity CLI."
    )
    parser.add_argument("--version", action="version", version=f"agy-bridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run every configured chat adapter until SIGTERM/SIGINT")
    run.add_argument("--config", type=Path, required=True, help="the TOML config file")
    console = sub.add_parser("console", help="chat with the agent on this terminal")
    console.add_argument("--config", type=Path, help="the TOML config file (optional)")
    console.add_argument("--thread", default="console", help="thread name (default: console)")
    console.add_argument("--user", default="", help="your name in the thread")
    doctor = sub.add_parser("doctor", help="check that agy and this machine are ready")
    doctor.add_argument("--config", type=Path, help="the TOML config file (optional)")
    doctor.add_argument(
        "--live", action="store_true", help="also run one short real turn through the plugin"
    )
    matrix = sub.add_parser("matrix", help="the operator's Matrix commands")
    matrix_sub = matrix.add_subparsers(dest="matrix_command", required=True)
    trust = matrix_sub.add_parser(
        "trust",
        help="acknowledge a Matrix user's changed identity (without a user: list the pins)",
    )
    trust.add_argument("--config", type=Path, required=True, help="the TOML config file")
    trust.add_argument("user", nargs="?", help="the Matrix id, @user:server")
    verify = matrix_sub.add_parser(
        "verify",
        help="list the verifications of the bot waiting for you (with the bot's emoji), "
        "or answer one",
    )
    verify.add_argument("--config", type=Path, required=True, help="the TOML config file")
    answer = verify.add_mutually_exclusive_group()
    answer.add_argument("--confirm", metavar="ID", help="the emoji match: verify")
    answer.add_argument("--reject", metavar="ID", help="the emoji differ: cancel")
    audit_cli.add_parser(sub.add_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"agy-bridge: {exc}", file=sys.stderr)
        return 2
    level = config.bridge.log_level
    if args.command == "console" and args.config is None and level in ("DEBUG", "INFO"):
        # The terminal is the chat: without a config asking for more, only problems are logged.
        level = "WARNING"
    setup_logging(level, json_lines=config.bridge.log_json, secrets=config.secret_values())
    try:
        if args.command == "run":
            return anyio.run(_run, config, backend="asyncio")
        if args.command == "console":
            return anyio.run(_console, config, args.thread, args.user, backend="asyncio")
        if args.command == "matrix" and args.matrix_command == "verify":
            return anyio.run(_matrix_verify, config, args.confirm, args.reject, backend="asyncio")
        if args.command == "matrix":
            return anyio.run(_matrix_trust, config, args.user, backend="asyncio")
        if args.command == "audit":
            return anyio.run(audit_cli.run, config, args, sys.stdout, sys.stderr, backend="asyncio")
    except ConfigError as exc:
        # Found at start, e.g. isolation = "bwrap" on a host where bubblewrap cannot work.
        print(f"agy-bridge: {exc}", file=sys.stderr)
        return 2
    from bridge.doctor import doctor

    return anyio.run(doctor, config, args.live, backend="asyncio")


async def _matrix_trust(config: Config, user: str | None) -> int:
    from bridge.chat.matrix.operator import trust

    status, text = await trust(config, user)
    print(text, file=sys.stdout if status == 0 else sys.stderr)
    return status


async def _matrix_verify(config: Config, confirm: str | None, reject: str | None) -> int:
    from bridge.chat.matrix.operator import verify

    status, text = await verify(config, confirm, reject)
    print(text, file=sys.stdout if status == 0 else sys.stderr)
    return status


async def _run(config: Config) -> int:
    from bridge.app import chat_adapters, open_bridge, start_adapters
    from bridge.heap import server_collector

    adapters = chat_adapters(config)
    if not adapters:
        print(
            "agy-bridge: no chat platform is configured: set [slack] bot_token (and app_token "
            "or signing_secret) or [matrix] homeserver and user_id; see config.example.toml",
            file=sys.stderr,
        )
        return 2
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with (
            open_bridge(config, adapters) as bridge,
            AsyncExitStack() as stack,
            anyio.create_task_group() as tg,
        ):
            posts, max_body = _webhooks(bridge)
            if config.admin.enabled or posts:
                from bridge.admin import open_admin

                admin = await stack.enter_async_context(
                    open_admin(
                        bridge.metrics,
                        host=config.admin.host,
                        port=config.admin.port,
                        health=lambda: health(bridge),
                        posts=posts,
                        max_body=max_body,
                    )
                )
                log.info(
                    "admin endpoint on %s (/healthz, /metrics%s)",
                    admin.url,
                    "".join(f", {path}" for path in posts),
                )
            if config.web.enabled:
                from bridge.web.serving import open_console

                await stack.enter_async_context(open_console(bridge.core))
            # Before the chat connections: a reconnect's discarded clients must stay collectable.
            stack.enter_context(server_collector())
            await start_adapters(bridge, tg)
            log.info("agy-bridge running with %s", ", ".join(adapters))
            async for signum in signals:
                log.info("received %s: stopping", signal.Signals(signum).name)
                break
            # Running turns are interrupted and reported while the chats are still connected.
            await bridge.core.shutdown()
            tg.cancel_scope.cancel()
    return 0


def _webhooks(bridge: Bridge) -> tuple[Mapping[str, PostHandler], int]:
    """The forges' webhook routes when a ``[forge] webhook_secret`` is set (served on the
    admin listener, which they open), and the body size they take."""
    from bridge.core.pulls import has_forge

    if not has_forge(bridge.config):
        # No forge, no webhooks: their receiver and payload models stay unimported.
        return {}, 1024  # as webhook_routes answers without an endpoint
    from bridge.core.forge_hooks import webhook_routes

    return webhook_routes(bridge.config, bridge.core, bridge.store, bridge.core.pulls)


async def health(bridge: Bridge) -> dict[str, Any]:
    slots = bridge.core.slots
    store_ok = await bridge.store.database.ping()
    return {
        "status": "ok" if store_ok else "error",
        **({} if store_ok else {"detail": "the store does not answer"}),
        "instance": bridge.core.leases.name,
        "store": "ok" if store_ok else "unreachable",
        "adapters": sorted(bridge.adapters),
        "live_processes": slots.live,
        "max_processes": slots.limit,
        "queued_threads": slots.queued,
        "active_threads": len(bridge.core.threads),
    }


async def _console(config: Config, thread: str, user: str) -> int:
    from bridge.app import open_bridge, start_adapters
    from bridge.chat.console.adapter import ConsoleAdapter, agy_available, simulator_command
    from bridge.chat.console.screen import Screen
    from bridge.chat.console.tour import banner
    from bridge.core.status import approvals_line

    command = None
    simulated = not agy_available(list(config.agy.command))
    if simulated:
        command = simulator_command()
        # The stand-in keeps its state in its own home, not in agy's (a machine without agy has
        # no ~/.gemini, and a sandbox refuses a state directory that does not exist).
        config = config.model_copy(update={"agy": config.agy.model_copy(update={"state_dirs": []})})
        config = _simulator_steps_allowed(config)
        # The simulator, like agy, refuses to start signed out: sign the stand-in in (it keeps
        # a login that is there), in the home the bridge will give it.
        env = dict(os.environ)
        if "AGY_SIM_HOME" not in config.agy.pass_env:
            env.pop("AGY_SIM_HOME", None)
        env.update(config.agy.env)
        await anyio.run_process([*command, "auth", "login"], env=env, check=False)
    adapter = ConsoleAdapter(thread=thread, user=user, simulated=simulated)
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with (
            open_bridge(config, {"console": adapter}, command=command) as bridge,
            AsyncExitStack() as stack,
            anyio.create_task_group() as tg,
        ):
            if config.web.enabled:
                from bridge.web.serving import open_console

                await stack.enter_async_context(open_console(bridge.core))
            # The same lines as `!status`: how threads are isolated and how approvals are set.
            lines = [bridge.runtime.isolation_status(), approvals_line(config.approvals)]
            Screen(sys.stderr).markdown(banner(lines, simulated=simulated))

            async def _on_signal() -> None:
                async for _ in signals:
                    await bridge.core.shutdown()
                    tg.cancel_scope.cancel()

            tg.start_soon(_on_signal)
            await start_adapters(bridge, tg)
            await adapter.eof.wait()
            await wait_idle(bridge.core, adapter.thread)
            tg.cancel_scope.cancel()
    return 0


def _simulator_steps_allowed(config: Config) -> Config:
    """On the simulator, its own step commands run without asking (see ``SIMULATOR_STEPS``);
    the banner's approvals line shows the rule."""
    from bridge.chat.console.tour import SIMULATOR_STEPS

    approvals = config.approvals
    if approvals.mode != "ask" or SIMULATOR_STEPS in approvals.allow_commands:
        return config
    rules = [*approvals.allow_commands, SIMULATOR_STEPS]
    return config.model_copy(
        update={"approvals": approvals.model_copy(update={"allow_commands": rules})}
    )


async def wait_idle(core: Core, thread: ThreadRef) -> None:
    """Until the thread has nothing waiting and no turn running."""
    while True:
        worker = core.threads.get(thread.key)
        pending = await core.store.pending(thread.key)
        # ``in_turn``: a turn that has taken its messages has none pending before it runs.
        if not pending and (worker is None or not worker.in_turn):
            return
        await anyio.sleep(0.05)
