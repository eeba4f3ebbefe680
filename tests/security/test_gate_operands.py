"""Attacks through the words a program writes to: ``cp a b``, ``tee f``, ``sed -i`` …

Under ``cp *`` the options of ``cp`` asked, but its operands were words like any other:
``cp x /anywhere`` ran, and so did ``tee``, ``touch``, ``mkdir``, ``rm``, ``dd of=``,
``ln``, ``install``, ``uniq IN OUT`` and ``split IN PREFIX`` to any path the OS user may
write. The tables now say, per program, which operands it writes (a program the gate does
not know writes all of them); a written operand is judged as a write by a file tool is: an
ordinary file of the workspace runs, anything else (outside, a protected path, a secret
path) asks. Through the simulator's real ``PreToolUse`` path and a real bash; ordinary work
in the workspace runs at once in the same tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.test_gate_attacks import TEAM, attacked

pytestmark = pytest.mark.anyio

WRITERS = ["cp", "mv", "tee", "install", "ln", "touch", "mkdir", "rm", "dd"]
RULES = [*TEAM, *(f"{name} *" for name in WRITERS), "uniq *", "sed *", "split *", "mytool *"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def attacks(outside: Path) -> list[str]:
    return [
        f"cp cfg.txt {outside}/copied",
        f"mv cfg2.txt {outside}/moved",
        f"mv {outside}/keep.txt here.txt",  # moving a file away writes (removes) it there
        f"tee {outside}/teed",
        f"install cfg.txt {outside}/installed",
        f"ln cfg.txt {outside}/linked",
        f"touch {outside}/touched",
        f"mkdir {outside}/made",
        f"rm {outside}/keep.txt",
        f"dd if=cfg.txt of={outside}/dd",
        f"uniq cfg.txt {outside}/uniq",
        f"split cfg.txt {outside}/part",
        f"sed -i s/a/b/ {outside}/keep.txt",
        # Protected paths inside the workspace, through operands.
        "cp cfg.txt .git/config",
        "tee .git/hooks/pre-commit",
        "touch .agents/plugins",
        "dd if=cfg.txt of=AGENTS.md",
        "sed -i s/x/y/ .git/config",
        # A program the gate has no table for: its operands are writes too.
        f"mytool {outside}/mine",
    ]


async def test_operands_a_program_writes_are_judged_as_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    async with attacked(tmp_path, monkeypatch, allow=RULES) as attack:
        ws = attack.workspace
        (ws / "cfg.txt").write_text("a line\n")
        (ws / "cfg2.txt").write_text("another\n")
        config = (ws / ".git" / "config").read_text()
        unasked = []
        for line in attacks(outside):
            before = len(attack.asked)
            await attack.turn(f"[[tool run_command {line}]]")
            if len(attack.asked) == before or attack.asked[-1].summary != line:
                unasked.append(line)
        assert unasked == [], "ran without a person"
        assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
        assert (outside / "keep.txt").read_text() == "keep\n"
        assert (ws / ".git" / "config").read_text() == config
        assert not (ws / "AGENTS.md").exists() and not (ws / ".agents").exists()
        # The same programs on ordinary files of the workspace run at once.
        await attack.runs_at_once(
            "cp cfg.txt copy.txt",
            "mv copy.txt moved.txt",
            "touch new.txt",
            "mkdir build",
            "tee out.txt",
            "ln cfg.txt hard.txt",
            "install cfg.txt build/installed.txt",
            "dd if=cfg.txt of=dd.txt",
            "uniq cfg.txt uniq.txt",
            "sed -i s/line/LINE/ cfg.txt",
            "rm moved.txt",
            "cat /etc/hostname",  # reading outside is not writing there
        )
        assert (ws / "dd.txt").exists() and (ws / "build" / "installed.txt").exists()
        assert (ws / "cfg.txt").read_text() == "a LINE\n"
        await attack.team_work_still_runs(pytest=True)
        assert not attack.pwned
