"""From the config to agy's sandbox: what each thread's agent sees, and whether it can be done.

``[agy] isolation`` unset means bubblewrap wherever it works on this host; ``"bwrap"`` set
explicitly refuses to start where it cannot work (naming the reason); ``"none"`` runs agy
unsandboxed. Without isolation the bridge still runs but says so loudly.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import anyio

from bridge.agy.egress import Egress
from bridge.agy.limits import Enforcement, Limits, enforcement
from bridge.agy.network import NetworkError, resolve_network
from bridge.agy.sandbox import (
    SYSTEM_PATHS,
    ExtraBinds,
    Isolation,
    Sandbox,
    bwrap_problem,
    find_bwrap,
    not_isolated,
    sandbox_problems,
)
from bridge.config import Config, ConfigError

SIMULATOR_MODULE = "bridge.simulator"


class IsolationError(ConfigError):
    """``isolation = "bwrap"`` was asked for where bubblewrap cannot work."""


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _install_root(executable: Path) -> Path:
    # <prefix>/bin/agy -> <prefix>: the whole installation (libraries next to bin/).
    return executable.parent.parent if executable.parent.name == "bin" else executable.parent


def install_paths(command: Sequence[str]) -> list[Path]:
    """agy's installation, to be visible read-only: where the command and its target live."""
    found = shutil.which(command[0])
    if found is None:
        return []
    path = Path(os.path.abspath(found))
    real = Path(os.path.realpath(path))
    paths = [_install_root(real)]
    if path != real:
        prefix = path.parent.parent
        # A Python virtualenv works only through its own folder (pyvenv.cfg, site-packages);
        # any other symlink needs only itself.
        paths.append(prefix if (prefix / "pyvenv.cfg").is_file() else path)
    if len(command) >= 3 and command[1] == "-m":
        # `python -m package`: the package's own folder (found as this interpreter finds it).
        spec = importlib.util.find_spec(command[2].split(".")[0])
        if spec is not None and spec.submodule_search_locations:
            paths += [Path(location) for location in spec.submodule_search_locations]
    return paths


def state_dirs(config: Config, command: Sequence[str]) -> list[Path]:
    dirs = [path.expanduser() for path in config.agy.state_dirs]
    if SIMULATOR_MODULE in command:
        # The project's agy simulator keeps its state (login, conversations) in its own home.
        # Its home as the simulator will see it: set in [agy] env, or passed by name.
        passed = "AGY_SIM_HOME" in config.agy.pass_env
        configured = config.agy.env.get("AGY_SIM_HOME") or (
            os.environ.get("AGY_SIM_HOME") if passed else None
        )
        home = Path(configured) if configured else Path.home() / ".agy-sim"
        # The project's own tool: its home is made here (agy's own state must exist already).
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        dirs.append(home)
    return [Path(os.path.abspath(path)) for path in dirs]


def sandbox_for(config: Config, command: Sequence[str], bwrap: str) -> Sandbox:
    hidden = [config.bridge.data_dir.resolve()]
    if config.agy.state_root is not None:
        # Every thread's private agy state: each sandbox sees its own where agy expects it.
        hidden.append(config.agy.state_root.expanduser().resolve())
    if config.source is not None:
        hidden.append(config.source)
        folder = config.source.parent
        # A config straight in /etc (or /) hides only itself: the system must stay visible.
        if not any(_under(Path(system), folder) for system in SYSTEM_PATHS):
            hidden.append(folder)
    extras = [
        ExtraBinds(
            root=workspace.path.expanduser().resolve(),
            read_only=tuple(path.expanduser() for path in workspace.read_only),
            read_write=tuple(path.expanduser() for path in workspace.read_write),
        )
        for workspace in config.workspaces
        if workspace.read_only or workspace.read_write
    ]
    return Sandbox(
        bwrap=bwrap,
        hidden=tuple(hidden),
        state_dirs=tuple(state_dirs(config, command)),
        login_entries=tuple(config.agy.login_entries),
        state_root=config.agy.state_root.expanduser() if config.agy.state_root else None,
        install=tuple(install_paths(command)),
        extras=tuple(extras),
        repos=tuple(
            workspace.path.expanduser().resolve()
            for workspace in config.workspaces
            if workspace.worktree
        ),
        tmp_size=int(config.agy.tmp_size),
    )


async def resolve_isolation(
    config: Config,
    command: Sequence[str],
    *,
    locate: Callable[[], str | None] = find_bwrap,
) -> Isolation:
    """The isolation this bridge runs with. Raises IsolationError for an impossible "bwrap"."""
    wanted = config.agy.isolation
    egress = config.agy.egress
    if wanted == "none":
        if egress is not None:
            raise IsolationError('[agy] egress needs a sandbox, but isolation = "none"')
        return not_isolated('[agy] isolation = "none"')
    bwrap = locate()
    problem = await anyio.to_thread.run_sync(bwrap_problem, bwrap)
    if problem is not None:
        if wanted == "bwrap" or egress is not None:
            raise IsolationError(
                f'[agy] isolation = "bwrap", but {problem}. Fix that, or set isolation = "none" '
                "to run agy without a sandbox (threads can then read each other's files)"
            )
        return not_isolated(problem)
    assert bwrap is not None
    sandbox = sandbox_for(config, command, bwrap)
    problems = sandbox_problems(sandbox, executables(command))
    if problems:
        # Every thread would fail (or see what it must not): refuse now, in words.
        raise IsolationError("the sandbox cannot work: " + "; ".join(problems))
    try:
        network = await resolve_network(
            "private" if egress is not None else config.agy.network,
            bwrap,
            setup_seconds=config.agy.init_timeout,  # part of agy's start
        )
    except NetworkError as exc:
        raise IsolationError(
            f"{exc}" + (" ([agy] egress needs a network of its own)" if egress is not None else "")
        ) from None
    if egress is not None:
        network = replace(network, proxy=Egress(tuple(egress)).serving)
    return Isolation(sandbox=sandbox, network=network)


def executables(command: Sequence[str]) -> list[Path]:
    """agy's command as the host finds it: the path on PATH and the file it leads to."""
    found = shutil.which(command[0])
    if found is None:
        return []
    path = Path(os.path.abspath(found))
    return [path, Path(os.path.realpath(path))]


async def resolve_limits(config: Config) -> Enforcement:
    """How each thread's process and memory caps are enforced on this host (a cgroup per agy
    process where the bridge may create one, rlimits otherwise), decided once at start."""
    limits = Limits(
        max_processes=config.agy.max_processes_per_thread,
        max_memory=int(config.agy.max_memory_per_thread),
    )
    return await anyio.to_thread.run_sync(enforcement, limits)
