"""The bridge SIGKILLed at random moments while messages keep arriving, then restarted.

`python -m bridge console` is driven as a user runs it, on the agy simulator, with one data
dir across every run. Lines carry unique tokens. A line the bridge had not stored when it was
killed was never acknowledged, so it is sent again to the next run, as a chat platform
redelivers an unacknowledged event. At the end the store, the simulator's conversations, the
outputs and /proc must agree: nothing lost, nothing delivered twice, every broken turn
reported, no agy left running.

The twenty kill cycles run as four test items of five cycles each (every item its own bridge,
data dir and simulator home), so pytest-xdist spreads them over the workers instead of one
worker waiting on all twenty restarts in a row: the same kinds of moments are drawn as before,
in chains of five restarts.

The seed is printed; set BRIDGE_FAULT_SEED to replay a run (with the item's id to replay one
item).
"""

from __future__ import annotations

import os
import random
import re
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.faults.console import (
    ConsoleRun,
    console_env,
    marked_processes,
    read_store,
    sim_conversation_messages,
    start_console,
    wait_no_marked_processes,
    write_config,
)
from tests.faults.forked import Zygote

CYCLES = 20
PARTS = 4
TOKEN = re.compile(r"tok-\d{2}-\d{3}")
RESTART_NOTICE = "The bridge restarted while the agent was working"
RESTART_ERROR = "the bridge restarted during this turn"
# What a line asks of the simulated agent: mostly short turns, some with two model calls (an
# injection point between them), a few with a command that outlives a killed bridge.
DIRECTIVES = [
    ("", 3),
    ("[[sleep 0.4]]", 3),
    ("[[calls 2]] [[sleep 0.3]]", 3),
    ("[[tool run_command sleep 1]]", 1),
]


def _directive(rng: random.Random) -> str:
    choices, weights = zip(*DIRECTIVES, strict=True)
    return rng.choices(choices, weights)[0]


class Sender:
    """The user and the platform: new lines, and redelivery of lines never stored."""

    def __init__(self, root: Path, rng: random.Random):
        self.root = root
        self.rng = rng
        self.lines: dict[str, str] = {}
        self.resent = 0

    def new_line(self, run: ConsoleRun, cycle: int, directive: str | None = None) -> None:
        token = f"tok-{cycle:02d}-{len(self.lines):03d}"
        line = f"{token} {_directive(self.rng) if directive is None else directive}".strip()
        self.lines[token] = line
        run.send(line)

    def redeliver(self, run: ConsoleRun) -> None:
        stored = set(_inbox_tokens(self.root))
        for token, line in self.lines.items():
            if token not in stored:
                self.resent += 1
                run.send(line)


def _inbox_tokens(root: Path) -> list[str]:
    """The tokens of every line the store took. A bridge killed before its schema was made
    (the file there, the tables not yet: a kill drawn early in a slow start) took none."""
    if not (root / "data" / "bridge.sqlite3").exists():
        return []
    if not read_store(root, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'inbox'"):
        return []
    return [t for r in read_store(root, "SELECT text FROM inbox") for t in TOKEN.findall(r[0])]


def _running_turns(root: Path) -> list[object]:
    """Turns the running bridge has begun and not ended (SQLite's WAL lets a reader in)."""
    if not (root / "data" / "bridge.sqlite3").exists():
        return []
    try:
        return [r[0] for r in read_store(root, "SELECT id FROM turns WHERE state = 'running'")]
    except sqlite3.OperationalError:  # the bridge is still creating it
        return []


def _kill_mid_turn(root: Path, run: ConsoleRun, sender: Sender, cycle: int) -> ConsoleRun:
    """A kill that surely lands inside a turn: a line asks for a turn of a second, the kill
    comes once the store shows a turn running."""
    run.wait_ready()
    sender.new_line(run, cycle, "[[sleep 1]]")
    deadline = time.monotonic() + 60
    while not _running_turns(root):
        assert run.proc.poll() is None, f"the console exited early:\n{run.err()}"
        assert time.monotonic() < deadline, f"no turn began:\n{run.err()}"
        time.sleep(0.02)
    time.sleep(sender.rng.uniform(0.0, 0.3))
    run.kill()
    return run


def _one_cycle(
    root: Path,
    config: Path,
    sender: Sender,
    rng: random.Random,
    cycle: int,
    mid_turn: bool,
    zygote: Zygote,
) -> ConsoleRun:
    run = start_console(root, config, f"run-{cycle:02d}", zygote=zygote)
    sender.redeliver(run)
    if mid_turn:
        return _kill_mid_turn(root, run, sender, cycle)
    if rng.random() < 0.25:
        # Killed while starting: opening the store, reaping, reporting, resuming.
        deadline = time.monotonic() + rng.uniform(0.0, 1.5)
    else:
        run.wait_ready()
        # Turns take up to about a second (the directives): a window of two covers kills
        # before, during and between them.
        deadline = time.monotonic() + rng.uniform(0.1, 2.0)
    while time.monotonic() < deadline:
        sender.new_line(run, cycle)
        # Pacing the user's typing (not synchronisation): lines land mid-turn and between turns.
        time.sleep(min(rng.uniform(0.05, 0.6), max(0.0, deadline - time.monotonic())))
    run.kill()
    return run


def _running_turns(root: Path) -> set[int]:
    """The turns the store holds as running (no bridge runs now; none before a run has made
    the store and its tables: the first may be killed before)."""
    if not (root / "data" / "bridge.sqlite3").exists():
        return set()
    made = read_store(root, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'turns'")
    if not made:
        return set()
    return {r["id"] for r in read_store(root, "SELECT id FROM turns WHERE state = 'running'")}


def _told_not_recorded(run: ConsoleRun, before: set[int], after: set[int]) -> int:
    """How many restart notices ``run`` printed for turns it did not record as told: it reports
    the turns running at its start, telling then recording each, so a kill can fall between
    the two for one turn at most."""
    recorded = len(before - after)
    told = run.out().count(RESTART_NOTICE)
    assert told - recorded in (0, 1), f"{run.stdout.name}: {told} notices, {recorded} recorded"
    return told - recorded


@pytest.mark.faults
@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("part", range(PARTS))
def test_sigkill_at_random_moments_loses_nothing_and_repeats_nothing(
    tmp_path: Path, part: int, zygote: Zygote, request: pytest.FixtureRequest
) -> None:
    seed = int(os.environ.get("BRIDGE_FAULT_SEED") or random.SystemRandom().randrange(2**32))
    print(f"SIGKILL fault seed: {seed} (BRIDGE_FAULT_SEED={seed} replays it)")
    try:
        _run(tmp_path, seed, part, zygote)
    except BaseException as exc:
        # Whatever failed (an assertion, a console that never got ready, a timeout), the
        # failure message says how to run the same random choices again.
        exc.add_note(
            f"SIGKILL fault seed {seed}: replay with BRIDGE_FAULT_SEED={seed} "
            f"python -m pytest '{request.node.nodeid}' (the choices of lines, directives and "
            "kill moments repeat; the machine's timing does not)"
        )
        raise


def _run(tmp_path: Path, seed: int, part: int, zygote: Zygote) -> None:
    # The part is mixed in: one BRIDGE_FAULT_SEED gives the four items different choices.
    rng = random.Random(f"{seed}/{part}")
    config = write_config(tmp_path)
    sim_home = tmp_path / "sim-home"
    needle = f"AGY_SIM_HOME={sim_home}"
    assert needle in {f"{k}={v}" for k, v in console_env(tmp_path).items()}
    sender = Sender(tmp_path, rng)
    cycles = range(part * CYCLES // PARTS, (part + 1) * CYCLES // PARTS)
    # Twenty random kills landed in a turn about twelve times; five might all miss one, so in
    # each item one kill (at a random place in its chain) waits for a turn to be running.
    sure = rng.choice(cycles)
    runs, unrecorded = [], 0
    for c in cycles:
        before = _running_turns(tmp_path)
        runs.append(run := _one_cycle(tmp_path, config, sender, rng, c, c == sure, zygote))
        unrecorded += _told_not_recorded(run, before, _running_turns(tmp_path))

    final = start_console(tmp_path, config, "final", zygote=zygote)
    sender.redeliver(final)
    assert final.finish() == 0, final.err()
    runs.append(final)
    context = f"(seed {seed}; logs in {tmp_path / 'logs'})"

    # Every line was stored exactly once, and nothing is left waiting or failed.
    inbox = read_store(tmp_path, "SELECT text, state, turn_id FROM inbox")
    rows = {TOKEN.findall(r["text"])[0]: r for r in inbox}
    counts = Counter(t for r in inbox for t in TOKEN.findall(r["text"]))
    assert set(counts) == set(sender.lines), context
    assert all(n == 1 for n in counts.values()), f"stored twice: {counts} {context}"
    states = Counter(r["state"] for r in inbox)
    assert set(states) <= {"turn", "injected"}, f"{states} {context}"
    turns = read_store(tmp_path, "SELECT id, state, error FROM turns")
    assert not [t for t in turns if t["state"] == "running"], context
    broken = {t["id"] for t in turns if t["state"] == "interrupted" and t["error"] == RESTART_ERROR}

    # Delivered to agy at most once; a line agy never got was part of a turn reported broken.
    seen = Counter(
        t
        for text in sim_conversation_messages(sim_home, ("user", "injected"))
        for t in TOKEN.findall(text)
    )
    twice = {t: n for t, n in seen.items() if n > 1}
    assert not twice, f"delivered to agy more than once: {twice} {context}"
    unaccounted = [t for t in sender.lines if not seen[t] and rows[t]["turn_id"] not in broken]
    assert not unaccounted, f"never delivered and never reported: {unaccounted} {context}"

    # Every turn a restart broke was reported in the thread, once.
    # A console cannot read back what it printed: a run killed after printing a notice and
    # before recording it leaves the turn to be told again (a double rather than a loss, see
    # recovery.tell_cut_off). Each such run is counted from the store; no other double passes.
    notices = sum(run.out().count(RESTART_NOTICE) for run in runs)
    assert notices == len(broken) + unrecorded, (
        f"{notices} notices for {len(broken)} broken turns ({unrecorded} told by a run killed "
        f"before it recorded them) {context}"
    )
    assert broken, f"no kill landed mid-turn, so this run proved little {context}"
    for run in runs:
        assert "internal error" not in run.out(), context
        assert "could not be handed to the agent" not in run.out(), context

    wait_no_marked_processes(needle)
    assert not marked_processes(needle)
    print(
        f"{len(sender.lines)} lines, {sender.resent} redelivered, {len(broken)} turns broken "
        f"by a kill, {sum(1 for t in sender.lines if not seen[t])} reported instead of delivered"
    )
