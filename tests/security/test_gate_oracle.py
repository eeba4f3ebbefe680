"""The gate's reading of a line, checked against bash itself.

Random lines, plain and not (expansions, globs, quotes, escapes, redirections, operators,
keywords …), are judged by the policy. Every line it allows is then run by a real bash whose
PATH holds only shims that log each program started with its argv. The programs started must
be exactly the commands the gate predicted, with exactly their argv: a gate that reads a line
differently from bash would be caught here, whatever its own parser thinks.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from bridge.core.approvals.policy import Allow, Policy, Rules

PROGRAMS = ["ls", "cat", "git", "grep", "wc", "tool", "pytest"]
RULES = Rules(allow_commands=[f"{p} *" for p in PROGRAMS])
SEPARATORS = [" && ", " || ", "; ", " | ", "\n", " & ", " |& ", ";", "&&", "|"]
# Words: plain ones, and pieces that make bash expand, run or redirect something.
PLAIN_WORDS = [
    "-la", "x.py", "a=b", "--opt=val", "'a b'", '"c d"', "'$HOME'", '"x"y', "@", "%s",
    "HEAD^", "a,b", "1", "-5", "\\rm", "\\;", "'*'", '"a|b"', "''", '""', "é", "a#b",
]  # fmt: skip
RISKY_WORDS = [
    "$HOME", "${x}", "${x@P}", "$(tool sub)", "`tool tick`", "{a,b}", "*", "?", "[ab]",
    "~", "~/x", "$((1+2))", "$[1+1]", "<(tool p)", ">out", "2>&1", "<<<x", "#c", "$'a'",
    '"$x"', '"`tool q`"', "a\\\nb", "!", "((1))", "x=1", "(tool s)", "{", "}", "\\",
    "'unclosed", "a*b", "$x$y", "$@", "${#x}", "a\u00a0b", "a\rb", "\t", "'a\nb'", "\\\n",
    "%", "-", "--", "$", "\\$x", "\\`", "'\\'", '"\\"', "@(a)", "+(a)", "a=~",
]  # fmt: skip
HEADS = [*PROGRAMS, "time", "eval", "command", "exec", "x=1", "!", "if", "for", "{", "then"]
LINES = 400
SEED = 20261201


def random_line(rng: random.Random) -> str:
    commands = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        head = rng.choice(PROGRAMS) if rng.random() < 0.8 else rng.choice(HEADS)
        words = [head]
        for _ in range(rng.randint(0, 4)):
            pool = PLAIN_WORDS if rng.random() < 0.75 else RISKY_WORDS
            words.append(rng.choice(pool))
        commands.append(" ".join(words))
    line = commands[0]
    for command in commands[1:]:
        line += rng.choice(SEPARATORS if rng.random() < 0.3 else SEPARATORS[:4]) + command
    return line


@pytest.fixture
def shims(tmp_path: Path) -> Path:
    folder = tmp_path / "shims"
    folder.mkdir()
    script = (
        "#!/bin/sh\n"
        # One new file per process (a pipeline's run at once), made with builtins only (PATH
        # holds nothing else): argv joined by NUL.
        "n=0\n"
        'while ! { set -C; : > "$SHIM_LOG/$$.$n"; } 2>/dev/null; do n=$((n + 1)); done\n'
        '{ printf "%s\\0" "${0##*/}"; for a in "$@"; do printf "%s\\0" "$a"; done; }'
        ' >| "$SHIM_LOG/$$.$n"\n'
    )
    for name in PROGRAMS:
        path = folder / name
        path.write_text(script)
        path.chmod(0o755)
    return folder


def started(log: Path) -> Counter[tuple[str, ...]]:
    runs: Counter[tuple[str, ...]] = Counter()
    for entry in log.iterdir():
        runs[tuple(entry.read_bytes().decode().split("\0")[:-1])] += 1
    return runs


def test_what_the_gate_allows_is_what_bash_runs(tmp_path: Path, shims: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    policy = Policy(RULES)
    rng = random.Random(SEED)
    allowed = asked = 0
    work = tmp_path / "work"
    work.mkdir()
    for number in range(LINES):
        line = random_line(rng)
        if not isinstance(policy.judge_command(line), Allow):
            asked += 1
            continue
        allowed += 1
        parsed = policy.parser.parse(line)
        log = tmp_path / f"log{number}"
        log.mkdir()
        # Only the shims on PATH: any other program bash tried to start would not be found.
        env = {"PATH": str(shims), "SHIM_LOG": str(log), "HOME": str(tmp_path), "x": "1"}
        subprocess.run(
            [bash, "-c", line],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
        predicted = Counter(parsed.commands)
        ran = started(log)
        if "||" in line:
            # `a || b` runs b only when a fails; the shims succeed.
            assert not ran - predicted, (line, ran, predicted)
        else:
            assert ran == predicted, (line, ran, predicted)
    # Both kinds were generated in numbers, so the check is not vacuous.
    assert allowed > LINES // 5 and asked > LINES // 5, (allowed, asked)
    assert os.listdir(work) == [], "an allowed line wrote a file (a redirection ran)"
