"""`make run` on a fresh machine, in a real pseudo-terminal, as a newcomer sees it.

No agy on PATH, an empty HOME, and ``CONFIG`` naming a file that does not exist (a developer's
config.toml must not switch `make run` away from the console). The test pastes the banner's
three tour lines and checks what the screen shows: a streamed answer, the late line marked as
seen by the running turn, an approval asked and answered, a stop. Where timing matters it
steers the simulator with ``[[wait FILE]]`` appended to the tour's line (the last directive of
a kind wins, so ``[[sleep 0]]`` takes the human pauses out) and waits on what appears.

`make run` runs from a scratch folder holding links to the lock files the Makefile checks, so
the bridge's data directory is the test's own, not the repository's ``data/``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge.chat.console.tour import TOUR

pexpect = pytest.importorskip("pexpect", reason="pexpect (requirements-dev.lock) is missing")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
# Colours, cursor and mode changes, and OSC strings: what a person does not read as text.
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r")


class Screen:
    """What the pseudo-terminal showed so far, as text; ``wait`` looks only past the last
    thing it found, so each step checks the output that step caused."""

    def __init__(self, child: pexpect.spawn) -> None:
        self.child = child
        self.raw = ""
        self.text = ""
        self.seen_up_to = 0

    def wait(self, wanted: str, seconds: float = 20) -> str:
        """Until ``wanted`` appears; returns the text shown up to it since the last wait."""
        deadline = time.monotonic() + seconds
        while (at := self.text.find(wanted, self.seen_up_to)) == -1:
            left = deadline - time.monotonic()
            assert left > 0, f"the screen never showed {wanted!r}:\n{self.text}"
            try:
                self.raw += self.child.read_nonblocking(65536, timeout=left)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                raise AssertionError(f"ended before {wanted!r}:\n{self.text}") from None
            self.text = _CONTROL.sub("", self.raw)
        shown = self.text[self.seen_up_to : at + len(wanted)]
        self.seen_up_to = at + len(wanted)
        return shown

    def type(self, line: str) -> None:
        self.child.sendline(line)
        # The terminal echoes what is typed: that is not the bridge's output.
        self.wait(line)


def _fresh_machine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder to run `make run` from, and the environment of a machine without agy."""
    venv = Path(sys.prefix)
    run = tmp_path / "run"
    run.mkdir()
    for name in ("pyproject.toml", *sorted(p.name for p in REPO.glob("requirements*.lock"))):
        (run / name).symlink_to(REPO / name)
    home = tmp_path / "home"
    home.mkdir()
    path = f"{venv / 'bin'}:/usr/bin:/bin"
    if shutil.which("agy", path=path):
        pytest.skip("agy is installed here: `make run` would talk to it, not to the simulator")
    env = {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "TERM": "xterm-256color"}
    # The virtualenv `make run` would use must be the one `make venv` made and is up to date:
    # otherwise `make run` would spend the test installing it.
    fresh = subprocess.run(
        ["make", "-s", "-q", "-f", str(REPO / "Makefile"), "venv", f"VENV={venv}"],
        cwd=run,
        env=env,
        capture_output=True,
    )
    if fresh.returncode != 0:
        reason = f"{venv} is not an up-to-date `make venv` virtualenv: run `make venv` first"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return run, env


def test_a_newcomer_pastes_the_tour_lines(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    run, env = _fresh_machine(tmp_path)
    absent = tmp_path / "no-such-config.toml"
    make_run = ["--no-print-directory", "-f", str(REPO / "Makefile"), "run"]
    child = pexpect.spawn(
        "make",
        [*make_run, f"VENV={sys.prefix}", f"CONFIG={absent}"],
        cwd=str(run),
        env=env,
        encoding="utf-8",
        codec_errors="replace",
        dimensions=(50, 220),
    )
    screen = Screen(child)
    try:
        banner = screen.wait(TOUR[-1])
        assert "built-in agy simulator" in banner
        assert re.search(r"• (🔒 Isolated|⚠️ Not isolated): ", banner), banner
        assert "• Approvals: ask: " in banner and "echo step *" in banner, banner
        assert "`" not in banner, "the banner's Markdown is rendered, not shown raw"

        # A plain message: the simulator's default reply, then the hint.
        screen.type("hello")
        screen.wait("You said: ")
        screen.wait("hello")
        screen.wait("The simulator only repeats what it got.")

        # 1. A turn that works; a line typed meanwhile is handed to it and marked.
        screen.type(f"{TOUR[0]} [[sleep 0]] [[touch started]] [[wait go]]")
        screen.wait("› run_command echo step 1")
        screen.type("one more thing")
        screen.wait("message 3: queued for the next turn")
        [started] = (run / "data").rglob("started")
        (started.parent / "go").touch()  # the simulator's working folder: the thread's own
        screen.wait("message 3: seen by the agent mid-turn")
        answer = screen.wait("one more thing")
        assert "You said: " in answer and "Injected: " in answer, answer

        # 2. A command that waits for approval; "always" is offered for a plain command.
        screen.type(TOUR[1])
        asked = screen.wait("approve? [y/a/N]")
        assert "Approval needed" in asked and "ls -la" in asked and "**" not in asked, asked
        screen.type("y")
        screen.wait("✅ Approved by ")
        screen.wait("You said: ")

        # 3. A long turn, stopped.
        screen.type(f"{TOUR[2]} [[sleep 0]] [[wait never]]")
        screen.wait("› run_command echo step 1")
        screen.type("!stop")
        stopped = screen.wait("Interrupted.")
        assert "_" not in stopped.rsplit("\n", 1)[-1], "the italics are rendered"

        child.sendeof()
        child.expect(pexpect.EOF, timeout=20)
    finally:
        child.close(force=True)
        print(screen.text)  # the transcript, shown by pytest when the test fails (or with -s)
    assert child.exitstatus == 0, screen.text
