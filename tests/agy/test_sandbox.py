"""The sandbox's layout, the worktree check, and deciding whether bubblewrap can work here."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.agy.sandbox import (
    ExtraBinds,
    Sandbox,
    bwrap_problem,
    find_bwrap,
    git_common_dir,
    plan,
    prepare_binds,
    sandbox_problems,
    wrap,
)
from bridge.app import open_bridge
from bridge.config import build_config, load_config
from bridge.isolation import IsolationError, install_paths, resolve_isolation, sandbox_for
from tests.agy.sandboxed import require_bwrap
from tests.core.harness import SIMULATOR, RecordingAdapter

# What bubblewrap says on a host without unprivileged user namespaces (Debian before 11, many
# container runtimes): its own words, so the reason the bridge gives can be checked.
NO_NAMESPACES = (
    "bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
    "non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl "
    "kernel.unprivileged_userns_clone=1'."
)


def failing_bwrap(folder: Path) -> Path:
    """A ``bwrap`` on PATH that fails as bubblewrap does where it cannot create namespaces."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bwrap"
    path.write_text(f'#!/bin/sh\necho "{NO_NAMESPACES}" >&2\nexit 1\n')
    path.chmod(0o755)
    return path


# --- the layout ---------------------------------------------------------------------------------


def test_a_hidden_folder_under_a_bound_one_is_covered_and_own_folders_come_back(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app"  # a bound folder holding the config and the data directory
    data = app / "data"
    work, session = data / "workspaces" / "t1", data / "sessions" / "t1"
    for folder in (work, session, data / "sessions" / "other"):
        folder.mkdir(parents=True)
    config = app / "config.toml"
    config.write_text("secret")
    sandbox = Sandbox(bwrap="bwrap", hidden=(data, config), install=(app,))
    mounts = [(m.kind, str(m.dest)) for m in plan(sandbox, workdir=work, session_dir=session)]
    order = [dest for _, dest in mounts]
    assert ("ro", str(app)) in mounts
    assert ("tmpfs", str(data)) in mounts and ("hide-file", str(config)) in mounts
    assert ("rw", str(work)) in mounts and ("rw", str(session)) in mounts
    # Parents first: the app, then data hidden, then the thread's own folders bound back.
    assert order.index(str(app)) < order.index(str(data)) < order.index(str(work))
    assert order.index(str(data)) < order.index(str(session))
    assert not any("other" in dest for dest in order)


def test_hidden_folders_nothing_shows_are_left_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    work, session = data / "w", data / "s"
    work.mkdir(parents=True)
    session.mkdir()
    sandbox = Sandbox(bwrap="bwrap", hidden=(data,))
    kinds = {str(m.dest): m.kind for m in plan(sandbox, workdir=work, session_dir=session)}
    assert str(data) not in kinds  # not bound anywhere: nothing to cover
    assert kinds["/tmp"] == "tmpfs" and kinds["/usr"] == "ro"


def test_the_command_line(tmp_path: Path) -> None:
    work, session, state = tmp_path / "w", tmp_path / "s", tmp_path / "state" / "agy"
    work.mkdir()
    session.mkdir()
    (state / "antigravity-cli").mkdir(parents=True)
    (state / "antigravity-cli" / "token").write_text("{}")
    sandbox = Sandbox(
        bwrap="/usr/bin/bwrap",
        state_dirs=(state,),
        login_entries=("antigravity-cli/token", "absent.json"),
    )
    argv = wrap(sandbox, ["agy", "--print", ""], workdir=work, session_dir=session)
    assert argv[0] == "/usr/bin/bwrap"
    for flag in ("--unshare-pid", "--die-with-parent", "--proc", "--dev"):
        assert flag in argv
    assert "--unshare-net" not in argv  # agy needs its model API; the listener is on loopback
    assert argv[-4:] == ["--", "agy", "--print", ""]
    assert argv[argv.index("--chdir") + 1] == str(work)
    # The thread's private state where agy expects its own, read-only (agy's configuration is
    # the bridge's), what agy must write writable, the login on top, read-only.
    [private] = (state / ".agy-bridge-threads").iterdir()
    at = argv.index(str(state))
    assert argv[at - 2 : at + 1] == ["--ro-bind", str(private), str(state)]
    brain = str(state / "antigravity-cli" / "brain")
    assert argv[argv.index(brain) - 2 : argv.index(brain) + 1] == [
        "--bind",
        str(private / "antigravity-cli" / "brain"),
        brain,
    ]
    # After every mount, the root read-only.
    assert argv[argv.index("--chdir") - 2 : argv.index("--chdir")] == ["--remount-ro", "/"]
    token = str(state / "antigravity-cli" / "token")
    assert argv[argv.index(token) - 1 : argv.index(token) + 2] == ["--ro-bind", token, token]
    assert at < argv.index(token)  # the parent first: bind mounts stack in order
    assert (private / "antigravity-cli" / "token").is_file()  # its mount point
    assert "absent.json" not in " ".join(argv)
    assert private == state / ".agy-bridge-threads" / session.name  # under the bind: unseen
    assert not (session / "agy-state").exists()


def test_operator_paths_belong_to_their_workspace_only(tmp_path: Path) -> None:
    ws, other = tmp_path / "ws", tmp_path / "other"
    for folder in (ws, other, tmp_path / "s"):
        folder.mkdir()
    extra = ExtraBinds(root=ws, read_only=(tmp_path / "ro",), read_write=(tmp_path / "rw",))
    sandbox = Sandbox(bwrap="bwrap", extras=(extra,))
    mine = {str(m.dest): m.kind for m in plan(sandbox, workdir=ws, session_dir=tmp_path / "s")}
    assert mine[str(tmp_path / "ro")] == "ro-try" and mine[str(tmp_path / "rw")] == "rw-try"
    theirs = [str(m.dest) for m in plan(sandbox, workdir=other, session_dir=tmp_path / "s")]
    assert str(tmp_path / "ro") not in theirs


# --- git worktrees: the agent writes the .git file, so it is checked ---------------------------


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


@pytest.fixture
def worktree(tmp_path: Path) -> tuple[Path, Path]:
    repo, tree = tmp_path / "repo", tmp_path / "data" / "worktrees" / "t1"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(
        repo,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    _git(repo, "worktree", "add", "-q", "-b", "agy/t1", str(tree))
    return repo, tree


def test_a_real_worktree_gets_its_repository_git_directory(worktree: tuple[Path, Path]) -> None:
    repo, tree = worktree
    assert git_common_dir(tree) == (repo / ".git").resolve()
    assert git_common_dir(repo) is None  # a plain checkout has its .git inside its own folder


def test_a_forged_git_file_binds_nothing(worktree: tuple[Path, Path], tmp_path: Path) -> None:
    repo, tree = worktree
    data = tmp_path / "data"
    forged = tmp_path / "forged"
    forged.mkdir()
    # Pointing at the data directory, or at another worktree's entry: not believed.
    (forged / ".git").write_text(f"gitdir: {data}\n")
    assert git_common_dir(forged) is None
    (forged / ".git").write_text(f"gitdir: {repo / '.git' / 'worktrees' / 't1'}\n")
    assert git_common_dir(forged) is None
    # A complete fake repository the agent built inside the data directory looks right to git,
    # and is still never bound: it overlaps a hidden folder.
    fake = data / "fake"
    (fake / "worktrees" / "entry").mkdir(parents=True)
    (fake / "objects").mkdir()
    (fake / "HEAD").write_text("ref: refs/heads/main\n")
    (fake / "worktrees" / "entry" / "gitdir").write_text(str(forged / ".git"))
    (forged / ".git").write_text(f"gitdir: {fake / 'worktrees' / 'entry'}\n")
    assert git_common_dir(forged) == fake.resolve()
    sandbox = Sandbox(bwrap="bwrap", hidden=(data,))
    dests = [str(m.dest) for m in plan(sandbox, workdir=forged, session_dir=tmp_path / "s")]
    assert not any(dest.startswith(str(data)) for dest in dests)
    # The real worktree's repository is bound.
    dests = [str(m.dest) for m in plan(sandbox, workdir=tree, session_dir=tmp_path / "s")]
    assert str((repo / ".git").resolve()) in dests


def test_the_config_and_its_folder_are_hidden_but_never_the_system(tmp_path: Path) -> None:
    own = tmp_path / "etc" / "agy-bridge" / "config.toml"
    own.parent.mkdir(parents=True)
    own.write_text("")
    hidden = sandbox_for(load_config(own, environ={}), SIMULATOR, "bwrap").hidden
    assert own.resolve() in hidden and own.parent.resolve() in hidden
    assert (own.parent / "data").resolve() in hidden  # the data directory, relative to it
    config = load_config(own, environ={})
    config._source = Path("/etc/agy-bridge.toml")  # as if read from there
    hidden = sandbox_for(config, SIMULATOR, "bwrap").hidden
    assert Path("/etc/agy-bridge.toml") in hidden and Path("/etc") not in hidden


def test_install_paths_of_a_virtualenv_python_module() -> None:
    paths = install_paths(SIMULATOR)
    assert Path(sys.prefix) in paths  # the virtualenv, with its site-packages
    assert Path(__file__).resolve().parents[2] / "bridge" in paths  # the simulator's package


# --- can bubblewrap work here? -----------------------------------------------------------------


def test_a_missing_bwrap_is_named() -> None:
    problem = bwrap_problem(None)
    assert problem is not None and "not installed" in problem


def test_a_bwrap_that_cannot_create_namespaces_says_why(tmp_path: Path) -> None:
    problem = bwrap_problem(str(failing_bwrap(tmp_path / "bin")))
    assert problem is not None and "cannot create a sandbox" in problem
    assert "non-privileged user namespaces" in problem


def test_bwrap_works_on_this_host() -> None:
    require_bwrap()
    assert bwrap_problem(find_bwrap()) is None


@pytest.mark.anyio
async def test_none_runs_unisolated_and_says_so(tmp_path: Path) -> None:
    config = build_config({"agy": {"isolation": "none"}}, environ={})
    isolation = await resolve_isolation(config, SIMULATOR)
    assert not isolation.isolated
    assert 'isolation = "none"' in isolation.status_line()
    assert "NOT isolated" in isolation.warning()


@pytest.mark.anyio
async def test_unset_falls_back_to_none_where_bwrap_cannot_work(tmp_path: Path) -> None:
    config = build_config({}, environ={})
    missing = await resolve_isolation(config, SIMULATOR, locate=lambda: None)
    assert not missing.isolated and "not installed" in missing.problem
    broken = str(failing_bwrap(tmp_path / "bin"))
    failing = await resolve_isolation(config, SIMULATOR, locate=lambda: broken)
    assert not failing.isolated and "user namespaces" in failing.problem
    assert "Not isolated" in failing.status_line()


@pytest.mark.anyio
async def test_unset_means_bwrap_where_it_works(tmp_path: Path) -> None:
    require_bwrap()
    raw = {"agy": {"state_dirs": [], "env": {"AGY_SIM_HOME": str(tmp_path)}}}
    isolation = await resolve_isolation(build_config(raw, environ={}), SIMULATOR)
    assert isolation.isolated
    assert "Isolated" in isolation.status_line()


@pytest.mark.anyio
async def test_explicit_bwrap_where_it_cannot_work_refuses_naming_the_reason(
    tmp_path: Path,
) -> None:
    config = build_config({"agy": {"isolation": "bwrap"}}, environ={})
    with pytest.raises(IsolationError, match="not installed"):
        await resolve_isolation(config, SIMULATOR, locate=lambda: None)
    broken = str(failing_bwrap(tmp_path / "bin"))
    with pytest.raises(IsolationError, match="user namespaces"):
        await resolve_isolation(config, SIMULATOR, locate=lambda: broken)


def test_the_bridge_refuses_to_start_with_explicit_bwrap_it_cannot_use(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    failing_bwrap(folder)
    path = tmp_path / "config.toml"
    command = ", ".join(f'"{part}"' for part in SIMULATOR)
    path.write_text(f'[agy]\nisolation = "bwrap"\ncommand = [{command}]\n')
    # In its own process, as an operator starts it (the CLI sets up logging for the process).
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "console", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        input="",
        env={**os.environ, "PATH": f"{folder}:/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert 'isolation = "bwrap"' in done.stderr and "user namespaces" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.anyio
async def test_an_unisolated_bridge_warns_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap anywhere
    path = tmp_path / "config.toml"
    path.write_text(f'[agy]\ncommand = ["{sys.executable}", "-m", "bridge.simulator"]\n')
    config = load_config(path, environ={})
    with caplog.at_level(logging.WARNING):
        async with open_bridge(config, {"test": RecordingAdapter()}) as bridge:
            assert not bridge.runtime.isolation.isolated
            assert "Not isolated" in bridge.runtime.isolation_status()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("NOT isolated" in text and "not installed" in text for text in warnings)


# --- the session's plugins: read-only inside the read-write session directory -----------------


def test_the_sessions_plugins_are_bound_read_only_over_its_session_directory(
    tmp_path: Path,
) -> None:
    # The data directory under a read-only bind (agy installed beside it, say), not hidden: the
    # read-only bind of .agents is not "covered" by that one, the session's rw bind lies between.
    app = tmp_path / "app"
    work, session = app / "data" / "w", app / "data" / "s"
    work.mkdir(parents=True)
    session.mkdir()
    sandbox = Sandbox(bwrap="bwrap", install=(app,))
    mounts = [(m.kind, str(m.dest)) for m in plan(sandbox, workdir=work, session_dir=session)]
    agents = str(session / ".agents")
    assert ("rw", str(session)) in mounts and ("ro", agents) in mounts
    assert mounts.index(("rw", str(session))) < mounts.index(("ro", agents))


def test_inside_the_sandbox_the_plugin_is_read_only_and_the_flag_shows(tmp_path: Path) -> None:
    """A sandboxed command reads its hooks and its (shared) rules but cannot change them, nor
    move the plugin folder away; the pending flag the bridge raises from outside shows."""
    require_bwrap()
    from bridge.agy.plugin import pending_flag, plugin_dir, raise_flag, write_plugin

    sessions = [tmp_path / "data" / "sessions" / name for name in ("a", "b")]
    work = tmp_path / "data" / "w"
    work.mkdir(parents=True)
    for session in sessions:
        write_plugin(
            session,
            guidance="be nice",
            notes="",
            hook_commands={"PreInvocation": "printf '{}'"},
            hook_timeout=10,
            mcp_servers={},
            shared=tmp_path / "data" / "plugin-files",
        )
    a, b = (plugin_dir(session) for session in sessions)
    assert (a / "rules" / "AGENTS.md").stat().st_ino == (b / "rules" / "AGENTS.md").stat().st_ino
    before = {p: p.read_bytes() for p in (a / "hooks.json", a / "rules" / "AGENTS.md")}
    script = f"""
cd {a}
cat rules/AGENTS.md hooks.json >/dev/null && echo read-ok
echo evil >> rules/AGENTS.md && echo WROTE-RULES
true > hooks.json && echo WROTE-HOOKS
chmod u+w rules/AGENTS.md && echo CHMODDED
printf x > new-file && echo MADE-FILE
ln rules/AGENTS.md {sessions[0]}/rules-link && echo LINKED
mv {sessions[0]}/.agents {sessions[0]}/moved && echo MOVED
echo ready
i=0; while [ ! -e {pending_flag(sessions[0])} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
[ -e {pending_flag(sessions[0])} ] && echo saw-pending
"""
    argv = wrap(
        Sandbox(bwrap=find_bwrap() or "bwrap", hidden=(tmp_path / "data",)),
        ["sh", "-c", script],
        workdir=work,
        session_dir=sessions[0],
    )
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as sh:
        assert sh.stdout is not None
        said = []
        for line in sh.stdout:
            said.append(line.strip())
            if line.strip() == "ready":
                raise_flag(sessions[0])
        errors = sh.stderr.read() if sh.stderr else ""
    assert said == ["read-ok", "ready", "saw-pending"], (said, errors)
    # The linked rules are read-only files, and the mount is read-only whatever a mode says.
    for refusal in (
        "hooks.json: Read-only file system",
        "'rules/AGENTS.md': Read-only file system",  # chmod
        "new-file: Read-only file system",
        "Invalid cross-device link",  # no second name for a shared inode outside the mount
        "Device or resource busy",  # a mount point stays where it is
    ):
        assert refusal in errors, (refusal, errors)
    for path, content in before.items():
        assert path.read_bytes() == content
    assert (b / "rules" / "AGENTS.md").read_bytes() == before[a / "rules" / "AGENTS.md"]
    assert not (a / "new-file").exists() and not (sessions[0] / "rules-link").exists()
    assert (sessions[0] / ".agents").is_dir() and not (sessions[0] / "moved").exists()


def test_an_operators_linked_worktree_gets_its_repository_read_only(
    worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    repo, tree = worktree
    common = (repo / ".git").resolve()
    sandbox = Sandbox(bwrap="bwrap")
    (tmp_path / "s").mkdir()
    prepare_binds(sandbox, workdir=tree, session_dir=tmp_path / "s")
    mounts = {(m.kind, m.dest) for m in plan(sandbox, workdir=tree, session_dir=tmp_path / "s")}
    assert ("ro", common) in mounts
    assert not any(kind != "ro" and dest == common for kind, dest in mounts)
    assert ("ro", (tmp_path / "s").resolve() / "attachments") in mounts


def test_a_thread_repository_writes_its_own_git_directory_but_not_what_configures_it(
    worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    repo, _ = worktree
    own = tmp_path / "own"
    _git(tmp_path, "init", "-q", "--template=", str(own))
    sandbox = Sandbox(bwrap="bwrap")
    (tmp_path / "s").mkdir()
    prepare_binds(sandbox, workdir=own, session_dir=tmp_path / "s", repo=repo)
    mounts = {
        (m.kind, m.dest) for m in plan(sandbox, workdir=own, session_dir=tmp_path / "s", repo=repo)
    }
    gitdir = own.resolve() / ".git"
    assert ("rw", own.resolve()) in mounts
    for name in ("config", "hooks", "info", "objects/info"):
        assert ("ro", gitdir / name) in mounts, name
    for name in (".agents", ".gemini"):
        assert ("ro", own.resolve() / name) in mounts and (own / name).is_dir()
    # The team repository: its objects only, read-only.
    team = (repo / ".git").resolve()
    assert ("ro", team / "objects") in mounts
    assert not any(dest == team or (team in dest.parents and kind != "ro") for kind, dest in mounts)


def test_a_link_in_place_of_the_git_config_makes_the_git_directory_read_only(
    tmp_path: Path,
) -> None:
    own = tmp_path / "own"
    _git(tmp_path, "init", "-q", str(own))
    gitdir = own.resolve() / ".git"
    secret = tmp_path / "secret.toml"
    secret.write_text("token")
    (gitdir / "config").rename(gitdir / "config.real")
    (gitdir / "config").symlink_to(secret)
    mounts = plan(Sandbox(bwrap="bwrap"), workdir=own, session_dir=tmp_path / "s")
    assert not any(m.source == secret or m.dest == gitdir / "config" for m in mounts)
    assert any(m.kind == "ro" and m.dest == gitdir for m in mounts)
    # A link planted for hooks/ is replaced by a real folder before a sandbox starts.
    (gitdir / "config").unlink()
    (gitdir / "config.real").rename(gitdir / "config")
    shutil.rmtree(gitdir / "hooks", ignore_errors=True)
    (gitdir / "hooks").symlink_to(tmp_path)
    (tmp_path / "s").mkdir()
    prepare_binds(Sandbox(bwrap="bwrap"), workdir=own, session_dir=tmp_path / "s")
    assert (gitdir / "hooks").is_dir() and not (gitdir / "hooks").is_symlink()
    mounts = plan(Sandbox(bwrap="bwrap"), workdir=own, session_dir=tmp_path / "s")
    assert any(m.kind == "ro" and m.dest == gitdir / "config" for m in mounts)


def test_sandboxes_that_cannot_work_are_named(tmp_path: Path) -> None:
    data, folder = tmp_path / "data", tmp_path / "etc"
    data.mkdir()
    (folder / "bin").mkdir(parents=True)
    state = tmp_path / "state"
    state.mkdir()
    good = Sandbox(bwrap="bwrap", hidden=(data, folder), state_dirs=(state,))
    assert sandbox_problems(good, [tmp_path / "agy" / "bin" / "agy"]) == []
    [hidden_agy] = sandbox_problems(good, [folder / "bin" / "agy"])
    assert f"agy's installation ({folder / 'bin' / 'agy'}) lies inside {folder}" in hidden_agy
    missing = Sandbox(bwrap="bwrap", state_dirs=(tmp_path / "never-made",))
    [no_state] = sandbox_problems(missing)
    assert "never-made does not exist" in no_state
    overlap = Sandbox(
        bwrap="bwrap",
        hidden=(data,),
        extras=(ExtraBinds(root=tmp_path / "ws", read_write=(data / "sessions",)),),
    )
    [writes_data] = sandbox_problems(overlap)
    assert "lists" in writes_data and "overlaps" in writes_data and str(data) in writes_data
    around = Sandbox(
        bwrap="bwrap", hidden=(data,), extras=(ExtraBinds(root=tmp_path, read_write=(tmp_path,)),)
    )
    assert len(sandbox_problems(around)) == 1


def test_a_layout_that_would_weaken_the_sandbox_is_named(tmp_path: Path) -> None:
    """Start-up refuses what would silently make writable what every sandbox keeps read-only:
    the home, agy's state (its configuration), a worktree workspace's repository; and a login
    entry that would show the shared conversations."""
    state, repo = tmp_path / "home" / ".gemini", tmp_path / "repo"
    state.mkdir(parents=True)
    (repo / ".git").mkdir(parents=True)
    fine = ExtraBinds(root=repo, read_write=(tmp_path / "cache",))
    sandbox = Sandbox(bwrap="bwrap", state_dirs=(state,), repos=(repo,), extras=(fine,))
    assert sandbox_problems(sandbox) == []
    for path, named in [
        (Path.home(), "the home directory"),
        (tmp_path / "home", "agy's state directory"),
        (state / "antigravity-cli", "agy's state directory"),
        (repo, "the repository of a worktree workspace"),
        (repo / ".git" / "refs", "the repository of a worktree workspace"),
    ]:
        weak = sandbox.model_copy(update={"extras": (ExtraBinds(root=repo, read_write=(path,)),)})
        [problem] = sandbox_problems(weak)
        assert named in problem and str(path.resolve()) in problem, problem
    shown = sandbox.model_copy(update={"login_entries": ("antigravity-cli/brain",)})
    [problem] = sandbox_problems(shown)
    assert "login_entries names antigravity-cli/brain" in problem


def test_the_workspaces_protected_paths_are_read_only_as_they_are_spelt(tmp_path: Path) -> None:
    work, session = tmp_path / "w", tmp_path / "s"
    (work / ".github" / "workflows").mkdir(parents=True)
    session.mkdir()
    (work / "agents.md").write_text("rules")
    (work / "Gemini.md").write_text("rules")
    (work / "src.py").write_text("code")
    secret = tmp_path / "secret.toml"
    secret.write_text("token")
    (work / ".gitmodules").symlink_to(secret)  # a link is never bound (a bind follows it)
    sandbox = Sandbox(bwrap="bwrap")
    prepare_binds(sandbox, workdir=work, session_dir=session)
    read_only = {m.dest for m in plan(sandbox, workdir=work, session_dir=session) if m.kind == "ro"}
    work = work.resolve()
    for name in ("agents.md", "Gemini.md", ".github/workflows", ".agents", ".gemini"):
        assert work / name in read_only, name
    assert work / "src.py" not in read_only and work / ".gitmodules" not in read_only
