"""From a Matrix room to a merged pull request on a real Synapse: the agent commits, `!diff`,
`!pr` (co-authors by the configured mapping, else the Matrix id), a failing then passing check
told once each, `!merge` refused to a non-approver and done by an approver, cleanup."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.app import open_bridge, start_adapters
from bridge.chat.matrix import MatrixAdapter
from bridge.config import build_config
from tests.chat.matrix.conftest import FAST_TUNING, Human
from tests.chat.matrix.synapse import Synapse
from tests.chat.matrix.test_end_to_end import content
from tests.core.harness import SIMULATOR_ENV
from tests.doubles import signed_in
from tests.forge.conftest import REPO, TOKEN, Remote
from tests.forge.conftest import remote as remote

pytestmark = [pytest.mark.anyio, pytest.mark.synapse, pytest.mark.slow]


def commit(name: str, text: str) -> str:
    cmd = f"sh -c 'echo {text} > {name} && git add {name} && git commit -qm \"add {name}\"'"
    return f"[[tool run_command {cmd}]]"


async def test_matrix_room_to_merged_pull_request(
    synapse: Synapse, remote: Remote, tmp_path: Path
) -> None:
    alice = synapse.register(f"alice{os.urandom(3).hex()}", displayname="Alice Liddell")
    bob = synapse.register(f"bob{os.urandom(3).hex()}", displayname="Bob")
    bot = synapse.register(f"bot{os.urandom(3).hex()}", displayname="Agy Bot")
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp_path / "sim-home"))
    remote.github.repos[REPO].protected["main"] = ["build"]

    def from_bot(*words: str) -> Any:
        def match(e: object) -> bool:
            body = content(e).get("body", "")
            return getattr(e, "sender", "") == bot.user_id and all(w in body for w in words)

        return match

    def count(human: Human, room: str, *words: str) -> int:
        return sum(1 for e in human.timeline.get(room, []) if from_bot(*words)(e))

    async with Human.connect(synapse, alice) as human, Human.connect(synapse, bob) as other:
        room = await human.create_room([bot.user_id, bob.user_id])
        await other.join(room)
        config = build_config(
            {
                "bridge": {"data_dir": str(tmp_path / "data")},
                "agy": {
                    "command": [sys.executable, "-m", "bridge.simulator"],
                    "init_timeout": 30,
                    "isolation": "none",
                    "pass_env": SIMULATOR_ENV,
                },
                "matrix": {
                    "homeserver": synapse.base_url,
                    "user_id": bot.user_id,
                    "password": bot.password,
                    "allowed_users": [alice.user_id, bob.user_id],
                    "encryption": False,
                },
                "workspaces": [
                    {"path": str(remote.team), "worktree": True, "worktree_cleanup": "remove"}
                ],
                "forge": {
                    "api_url": remote.github.url,
                    "token": TOKEN,
                    "users": {"alice-gh": alice.user_id},
                    "poll_seconds": 0.2,
                    "poll_max_seconds": 0.4,
                },
                "approvals": {"mode": "off", "approvers": [alice.user_id]},
            },
            environ={},
        )
        adapter = MatrixAdapter(config.matrix, data_dir=config.bridge.data_dir, tuning=FAST_TUNING)
        async with open_bridge(config, {"matrix": adapter}) as bridge:
            async with anyio.create_task_group() as tg:
                await start_adapters(bridge, tg)
                await human.wait_joined(room, bot.user_id)
                await human.say(room, f"greet {commit('hello.txt', 'hi')}")
                await human.wait_event(room, from_bot("1 new commit(s)"), within=60)
                await other.say(room, "looks good")
                await human.wait_event(room, from_bot("You said:", "looks good"), within=60)
                await human.say(room, "!diff")
                await human.wait_event(room, from_bot("1 commit(s)", "add hello.txt"), within=60)

                await other.say(room, "!pr Greet")
                await human.wait_event(room, from_bot("only the approvers", "`!pr`"), within=60)
                await human.say(room, "!pr Greet")
                await human.wait_event(room, from_bot("Opened pull request #1:"), within=60)
                pull = remote.github.pulls[(REPO, 1)]
                assert "Co-authored-by: Alice Liddell <alice-gh@users.noreply.github.com>" in (
                    pull.body
                )
                assert f"Co-authored-by: Bob <{bob.user_id}>" in pull.body
                assert f"https://matrix.to/#/{room}" in pull.body
                sha = remote.git.branch_sha(REPO, pull.head) or ""

                remote.github.set_check(REPO, sha, "build", "completed", "failure", log="E no")
                await human.wait_event(room, from_bot("❌ failed: **build**"), within=60)
                remote.github.set_check(REPO, sha, "build", "completed", "success")
                await human.wait_event(room, from_bot("all checks passed"), within=60)
                await human.say(room, "!status")
                await human.wait_event(room, from_bot("Pull request: #1 (open)"), within=60)
                assert count(human, room, "❌ failed") == 1
                assert count(human, room, "all checks passed") == 1

                await other.say(room, "!merge")
                await human.wait_event(room, from_bot("only the approvers", "`!merge`"), within=60)
                await human.say(room, "!merge")
                await human.wait_event(room, from_bot("Merged pull request #1"), within=60)
                assert pull.merged
                assert not any((tmp_path / "data" / "worktrees").iterdir())
                await bridge.core.shutdown()
                tg.cancel_scope.cancel()
