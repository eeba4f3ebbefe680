"""An agent inside its sandbox attacking the host through what the bridge itself does.

The sandbox keeps the store and the config out of sight; these attacks go through the bridge
instead: its own git on a repository the agent wrote, its own writes into a folder the agent can
replace, its own reads of a file the agent flips, the listener token in ``ps``, a FIFO where the
bridge expects a ``.git`` file. Every one runs inside a real bubblewrap sandbox (the simulator as
agy, commands in a real bash), and every one keeps the legitimate use working beside it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import threading
from pathlib import Path

import anyio
import pytest

from bridge.core.events import AttachmentRef
from bridge.core.workspaces import thread_slug
from tests.agy.sandboxed import sandboxed_bridge
from tests.core.harness import thread
from tests.doubles import one_commit_repository
from tests.security.session import plugin_dirs, session_urls

# bridge.core.tools (and with it the MCP SDK, about 0.5 s of CPU) is imported by the tests that
# use it, not at collection, which every xdist worker pays for every module.

pytestmark = pytest.mark.anyio

A, B = thread("a"), thread("b")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def _repository(tmp_path: Path) -> Path:
    return one_commit_repository(tmp_path / "repo")


async def test_git_configuration_and_hooks_planted_by_an_agent_never_run_on_the_host(
    tmp_path: Path,
) -> None:
    repo = _repository(tmp_path)
    # The planted commands write here: a folder no sandbox shows, so only the host can.
    marks = tmp_path / "marks"
    marks.mkdir()
    workspaces = [{"channel": "room", "path": str(repo), "worktree": True}]
    async with sandboxed_bridge(tmp_path, workspaces=workspaces) as box:
        plant = (
            "common=$(git rev-parse --git-common-dir); "
            f'git config core.fsmonitor "touch {marks}/fsmonitor 2>/dev/null; false"; '
            f'git config core.hooksPath "$common/hooks"; '
            "for hook in post-checkout reference-transaction post-commit; do "
            f'printf "#!/bin/sh\\ntouch {marks}/$hook 2>/dev/null\\nexit 0\\n" '
            '> "$common/hooks/$hook"; '
            f'chmod +x "$common/hooks/$hook"; done; '
            f'printf "[core]\\n\\tfsmonitor = touch {marks}/worktree-config\\n" '
            '> "$(git rev-parse --git-dir)/config.worktree"; '
            "echo change > f.txt && git add f.txt && git commit -qm 'from the sandbox'"
        )
        output = await box.run(A, plant)
        assert output.endswith("rc=0\n"), output  # the agent can still commit
        # Another thread starts: the bridge adds its worktree with git, on the host.
        await box.turn(B, "[[tool run_command git status --short]]")
        # And the first thread's cleanup and checks run git there too.
        await box.turn(A, "[[tool run_command git log --oneline]]")
    assert sorted(os.listdir(marks)) == [], "a command the agent planted ran on the host"
    branch = f"agy/{thread_slug(A)}"
    assert "from the sandbox" in _git(repo, "log", "--format=%s", branch)
    # What the agent tried to configure did not stick.
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()


async def test_an_attachment_cannot_be_sent_outside_through_a_planted_link(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with sandboxed_bridge(tmp_path) as box:
        box.h.adapter.files["doc-1"] = b"first attachment\n"
        box.h.adapter.files["doc-2"] = b"second attachment\n"
        attachments = box.session_dir(A) / "attachments"
        await box.h.say(
            "here [[tool run_command true]]",
            where=A,
            attachments=[AttachmentRef(name="one.txt", source="doc-1")],
        )
        await box.h.adapter.wait_finished(1, A)
        seen = await box.run(A, f"cat {attachments}/*one.txt")
        assert "first attachment" in seen  # the agent reads what teammates send
        swap = await box.run(
            A,
            f"rm -rf {attachments}; ln -s {outside} {attachments}; "
            f"mv {attachments} {attachments}.old; mkdir -p {attachments}.new; "
            f"ln -s {outside} {attachments}",
        )
        done = len(box.h.adapter.finished(A)) + 1
        await box.h.say(
            "another [[tool run_command true]]",
            where=A,
            attachments=[AttachmentRef(name="two.txt", source="doc-2")],
        )
        await box.h.adapter.wait_finished(done, A)
    assert os.listdir(outside) == [], swap
    assert not attachments.is_symlink()
    saved = sorted(p.name for p in attachments.iterdir())
    assert any(name.endswith("two.txt") for name in saved), saved


async def test_a_file_flipped_to_a_link_at_the_config_is_never_posted(tmp_path: Path) -> None:
    from bridge.core.tools import ChatTools, PostFileArgs, ToolFailure

    async with sandboxed_bridge(tmp_path) as box:
        secret = box.config_path.read_bytes()
        assert b"xoxb-config-secret-" in secret
        # The agent flips report.txt between a regular file and a link to the config, as fast
        # as it can, in a process that outlives the turn.
        flipper = (
            "setsid bash -c 'while :; do "
            f"ln -sfn {box.config_path} link.tmp; mv -fT link.tmp report.txt; "
            "echo harmless report > file.tmp; mv -fT file.tmp report.txt; "
            "done' </dev/null >/dev/null 2>&1 &"
        )
        await box.run(A, flipper)
        worker = box.h.bridge.core.threads[A.key]
        assert worker.place is not None
        uploads: list[bytes] = []

        class Uploads:
            async def post_file(self, _thread: object, upload: object, _title: object) -> None:
                data = getattr(upload, "data", None)
                if data is None:  # the interface before the fix gave a path
                    data = Path(str(upload)).read_bytes()
                uploads.append(data)

        tools = ChatTools(
            A,
            Uploads(),  # type: ignore[arg-type]
            workdir=lambda: worker.place.workdir,  # type: ignore[union-attr]
            session_dir=lambda: worker.place.session_dir,  # type: ignore[union-attr]
            history=lambda _limit: _none(),
            max_file_bytes=1_000_000,
        )
        refused: list[str] = []
        # The flipper is at work once the file has been seen as a link (no event tells).
        with anyio.fail_after(20):
            while not (worker.place.workdir / "report.txt").is_symlink():
                await anyio.sleep(0.001)
        # At least 500 tries, and on until the flipper has left the file regular at one of
        # them (a loaded machine can starve it for a while): never the config.
        tries = 0
        with anyio.fail_after(60):
            while tries < 500 or b"harmless report\n" not in uploads:
                tries += 1
                try:
                    await tools.post_file(PostFileArgs(path="report.txt"))
                except (ToolFailure, OSError) as exc:
                    refused.append(str(exc))
        await box.run(A, "pkill -f link.tmp; true")
    leaked = [data for data in uploads if b"xoxb-config-secret-" in data]
    assert leaked == [], f"the config was uploaded {len(leaked)} times in {tries}"
    # The legitimate file does get posted (the flipper leaves it a regular file half the time).
    assert any(data == b"harmless report\n" for data in uploads), set(refused)


async def _none() -> list[tuple[float, str, str]]:
    return []


async def test_the_listener_token_is_in_no_process_argv_while_a_hook_runs(
    tmp_path: Path,
) -> None:
    from bridge.core.events import ApprovalChoice, Author
    from tests.agy.sandboxed import require_bwrap
    from tests.core.harness import running

    require_bwrap()
    bob = Author(id="@bob:test", display_name="Bob")
    approvals = {"approvals": {"mode": "ask", "timeout": 60}}
    async with running(tmp_path, extra=approvals, isolation="bwrap") as h:
        await h.say("[[tool run_command touch approved.txt]]")
        # The PreToolUse hook (curl) is now waiting for a person.
        await h.adapter.changes.until(lambda: len(h.adapter.requests) >= 1)
        [plugin] = plugin_dirs(h.bridge.config.bridge.data_dir.resolve())
        token = session_urls(plugin).token
        argvs = _every_argv()
        assert any("curl" in argv for argv in argvs), "no hook was running"
        await h.bridge.core.decide(thread(), "req-1", ApprovalChoice.APPROVE, bob)
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.error is None
    assert [argv for argv in argvs if token in argv] == []


def _every_argv() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue
    return found


async def test_a_fifo_where_the_bridge_reads_git_files_stalls_no_other_thread(
    tmp_path: Path,
) -> None:
    async with sandboxed_bridge(tmp_path) as box:
        await box.turn(B, "hello from b")
        # Thread A's workspace claims to be a git worktree whose back-link file is a FIFO:
        # reading it blocks until someone writes.
        workdir = box.workdir(A)
        fake = workdir / "fake-git" / "worktrees" / "a"
        fake.mkdir(parents=True)
        fifo = fake / "gitdir"
        os.mkfifo(fifo)
        (workdir / ".git").write_text(f"gitdir: {fake}\n")
        # Should the bridge block on it, this unblocks it after a while, and says so: the test
        # then fails instead of hanging.
        released = threading.Event()

        def release() -> None:
            if not stop.wait(30):
                released.set()
                with open(fifo, "w") as writer:
                    writer.write(str(workdir / ".git"))

        stop = threading.Event()
        watchdog = threading.Thread(target=release, daemon=True)
        watchdog.start()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(functools.partial(box.h.say, "start a", where=A))
                await box.turn(B, "[[tool run_command echo b still works]]")
                assert not released.is_set(), "thread B waited for thread A's FIFO"
                await box.h.adapter.wait_finished(1, A)
        finally:
            stop.set()
            watchdog.join()
        assert not released.is_set()


async def test_a_data_dir_and_config_below_a_folder_the_sandbox_shows_stay_hidden(
    tmp_path: Path,
) -> None:
    work = tmp_path / "ws"
    work.mkdir()
    # The operator shows the whole parent read-only, and agy's state folder is that parent's
    # sibling holding a copy of nothing: the data directory and the config lie below both.
    workspaces = [{"channel": "room", "path": str(work), "read_only": [str(tmp_path)]}]
    async with sandboxed_bridge(
        tmp_path, workspaces=workspaces, agy={"state_dirs": [str(tmp_path)]}
    ) as box:
        data, config = box.data_dir, box.config_path
        assert (data / "bridge.sqlite3").exists() and config.exists()
        seen = await box.run(
            A, f"ls {tmp_path}; cat {config}; ls -a {data}; cat {data}/bridge.sqlite3"
        )
        listing = await box.run(A, f"ls -a {config.parent} {data}")
    assert "xoxb-" not in seen and "SQLite format" not in seen
    assert "ws" in seen  # the read-only parent itself is shown
    assert "config.toml" not in listing and "bridge.sqlite3" not in listing, listing


async def test_agy_installed_in_the_config_folder_is_refused_at_start(tmp_path: Path) -> None:
    import sys

    from bridge.app import open_bridge
    from bridge.config import ConfigError, load_config
    from tests.agy.sandboxed import require_bwrap, write_config
    from tests.doubles import RecordingAdapter

    require_bwrap()
    # agy lives in <dir>/bin/agy, the config in <dir>/config.toml: hiding the config's folder
    # would hide agy too.
    agy = tmp_path / "etc" / "bin" / "agy"
    agy.parent.mkdir(parents=True)
    agy.write_text(f'#!/bin/sh\nexec {sys.executable} -m bridge.simulator "$@"\n')
    agy.chmod(0o755)
    path = write_config(tmp_path, agy={"command": [str(agy)]})
    assert path.parent == agy.parent.parent
    config = load_config(path, environ={})
    with pytest.raises(ConfigError, match="agy's installation"):
        async with open_bridge(config, {"test": RecordingAdapter()}):
            pass


async def test_secrets_the_bridge_does_not_know_stay_out_of_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSWORD", "pg-secret-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/ssh-agent-socket")
    monkeypatch.setenv("WANTED_BY_AGY", "passed-by-name")
    async with sandboxed_bridge(tmp_path, agy={"pass_env": ["WANTED_BY_AGY"]}) as box:
        env = await box.run(A, "env")
    assert "pg-secret-value" not in env and "aws-secret-value" not in env
    assert "SSH_AUTH_SOCK" not in env
    assert "WANTED_BY_AGY=passed-by-name" in env and "GIT_AUTHOR_NAME=" in env
