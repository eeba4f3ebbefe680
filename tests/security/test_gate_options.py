"""Attacks on what an allowed command may do: options that write, secrets read and posted.

Through the simulator's real ``PreToolUse`` path and a real bash (the harness of
:mod:`tests.security.test_gate_attacks`): each attack must ask (every request is denied, and
nothing happened), and the ordinary commands of the same rules run at once in the same test.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest

from bridge.core.approvals.secrets import RECHECK_SECONDS
from bridge.core.events import ApprovalChoice
from tests.security.test_gate_attacks import BOB, TEAM, attacked, git

pytestmark = pytest.mark.anyio

RULES = [*TEAM, "sort *", "cp *", "git show *"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def config_of(workspace: Path) -> str:
    return (workspace / ".git" / "config").read_text()


WRITES = [
    # git's --output writes the diff or log wherever it says, shaped by --format or
    # --line-prefix: here into the repository's own configuration.
    "git log -1 --format=tformat:[core]%n%x09fsmonitor=touch%x20pwned --output=.git/config",
    "git diff HEAD --line-prefix=x --output=.git/config",
    # An attached short value: the old check split on `=` only.
    "sort -o.git/config cfg.txt",
    "sort --out=.git/config cfg.txt",
    "cp cfg.txt -t.git",
    "cp -t.git cfg.txt",
]


async def test_options_that_write_are_judged_as_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each attack a turn of its own in one thread (see test_gate_attacks)."""
    async with attacked(tmp_path, monkeypatch, allow=RULES) as attack:
        ws = attack.workspace
        (ws / "cfg.txt").write_text("[core]\n\tfsmonitor = touch pwned\n")
        (ws / "config").write_text("[core]\n\tfsmonitor = touch pwned\n")
        (ws / "README").write_text("changed\n")
        before = config_of(ws)
        for line in WRITES:
            asked = len(attack.asked)
            await attack.turn(f"[[tool run_command {line}]]")
            assert config_of(ws) == before, f"{line!r} wrote the repository's configuration"
            assert [r.summary for r in attack.asked[asked:]] == [line]
        # Writes in the workspace, and everyday reads, run at once.
        await attack.team_work_still_runs(
            "sort -o sorted.txt cfg.txt", "git log --oneline --output=log.txt", "git diff --stat"
        )
        assert (ws / "sorted.txt").exists() and (ws / "log.txt").exists()
        await attack.turn("[[tool run_command git status]]")
        assert not attack.pwned


async def test_an_option_that_writes_outside_the_workspace_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with attacked(tmp_path, monkeypatch, allow=RULES) as attack:
        for line in (
            f"git log --output={outside}/x.txt",
            f"sort -o{outside}/y.txt README",
            f"sort -T {outside} README",
        ):
            await attack.turn(f"[[tool run_command {line}]]")
            assert attack.asked[-1].summary == line
        assert list(outside.iterdir()) == []
        await attack.team_work_still_runs()


async def test_unknown_options_ask_and_known_ones_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with attacked(tmp_path, monkeypatch, allow=[*RULES, "git log *"]) as attack:
        line = "git log --no-such-option-here"
        await attack.turn(f"[[tool run_command {line}]]")
        assert attack.asked[-1].summary == line
        assert "not an option the gate knows" in attack.asked[-1].preview
        git(attack.workspace, "commit", "-q", "--allow-empty", "-m", "second")
        git(attack.workspace, "commit", "-q", "--allow-empty", "-m", "third")
        # Words bash leaves alone, and options the table knows, run without a click.
        await attack.runs_at_once(
            "git diff HEAD~1",
            "git show HEAD~1:README",
            "git log --oneline main..HEAD~1",
            "git log -2 --format=%s HEAD^",
            "ls -la",
            "cat -n README",
        )


async def test_the_login_is_read_only_with_approval_and_never_posted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cat *` used to read agy's login (bound into every sandbox) without asking, and the
    scrubber knew only the config's secrets: the token went to the channel unchanged."""
    token = "ya29.a0-made-up-oauth-token-" + "Z" * 24
    async with attacked(tmp_path, monkeypatch) as attack:
        await attack.runs_at_once("ls")  # the thread's agy runs, its scrubber made
        login = tmp_path / "sim-home" / "sim-login.json"
        data = json.loads(login.read_text())
        # The login changes while the bridge runs (agy refreshes its token): the scrubber
        # reads it again (it looks at most once a second).
        login.write_text(json.dumps({**data, "access_token": token}))
        await anyio.sleep(RECHECK_SECONDS + 0.1)
        for line in (f"cat {login}", f"grep -r access {login.parent}", f"head -c 400 {login}"):
            await attack.turn(f"[[tool run_command {line}]]")
            assert attack.asked[-1].summary == line
            assert attack.asked[-1].always is False

        # A person approves the read; the agent then writes the token into its answer.
        adapter = attack.h.adapter
        done = len(adapter.finished())
        await attack.h.say(f"[[tool run_command cat {login}]] [[reply the token is {token}]]")
        await adapter.changes.until(lambda: len(adapter.requests) > attack.decided)
        request = adapter.requests[attack.decided]
        attack.decided += 1
        handle = f"req-{attack.decided}"  # the recording adapter's message for it
        await attack.h.bridge.core.decide(request.thread, handle, ApprovalChoice.APPROVE, BOB)
        await adapter.changes.until(lambda: len(adapter.finished()) > done)
        reply = adapter.finished()[done]
        shown = "".join(reply.deltas) + (reply.outcome.final_text if reply.outcome else "")
        assert token not in shown and "***" in shown, shown
        await attack.team_work_still_runs()


async def test_configured_secret_paths_ask_whatever_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "deploy.env").write_text("DEPLOY_KEY=made-up-deploy-key-0123456789\n")
    extra_rules = [*RULES, "sed -n *", "diff *", "wc *"]
    async with attacked(
        tmp_path, monkeypatch, allow=extra_rules, secret_paths=[str(secrets)]
    ) as attack:
        for line in (
            f"sed -n 1p {secrets}/deploy.env",
            f"diff {secrets}/deploy.env README",
            f"wc -c {secrets}/deploy.env",
            f"grep -rn KEY {secrets}",
        ):
            await attack.turn(f"[[tool run_command {line}]]")
            assert attack.asked[-1].summary == line
        await attack.team_work_still_runs("wc -l README", pytest=True)


def test_the_git_output_attack_really_writes_under_bash(tmp_path: Path) -> None:
    """The attack above is real: bash and git write the configuration from `git log`."""
    git(tmp_path, "init", "-q")
    (tmp_path / "a").write_text("a\n")
    git(tmp_path, "add", "a")
    git(tmp_path, "commit", "-q", "-m", "x")
    line = "git log -1 --format=tformat:[core]%n%x09editor=pwned --output=.git/config"
    subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True)
    assert "editor=pwned" in (tmp_path / ".git" / "config").read_text()
