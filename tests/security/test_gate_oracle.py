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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bridge.core.approvals.policy import Allow, Place, Policy, Rules

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


SHIM = (
    "#!/bin/sh\n"
    # One new file per process (a pipeline's run at once), made with builtins only (PATH
    # holds nothing else): argv joined by NUL.
    "n=0\n"
    'while ! { set -C; : > "$SHIM_LOG/$$.$n"; } 2>/dev/null; do n=$((n + 1)); done\n'
    '{ printf "%s\\0" "${0##*/}"; for a in "$@"; do printf "%s\\0" "$a"; done; }'
    ' >| "$SHIM_LOG/$$.$n"\n'
)


@pytest.fixture
def shims(tmp_path: Path) -> Path:
    folder = tmp_path / "shims"
    folder.mkdir()
    for name in PROGRAMS:
        path = folder / name
        path.write_text(SHIM)
        path.chmod(0o755)
    return folder


# Lines run by this many bashes at once: each is a process of its own with a log folder of its
# own, so the order does not matter; the test's wall time was its ~700 bash and shim starts one
# after the other (16 s on a loaded machine), the CPU the same either way.
AT_ONCE = 4


def run_each(lines: Sequence[str], cwd: Path, envs: Sequence[dict[str, str]]) -> None:
    """Each line under its own real ``bash -c``, with its environment, AT_ONCE at a time."""
    bash = shutil.which("bash")
    assert bash is not None

    def run(line: str, env: dict[str, str]) -> None:
        subprocess.run(
            [bash, "-c", line],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )

    with ThreadPoolExecutor(AT_ONCE) as pool:
        list(pool.map(run, lines, envs))


def started(log: Path) -> Counter[tuple[str, ...]]:
    runs: Counter[tuple[str, ...]] = Counter()
    for entry in log.iterdir():
        runs[tuple(entry.read_bytes().decode().split("\0")[:-1])] += 1
    return runs


def test_what_the_gate_allows_is_what_bash_runs(tmp_path: Path, shims: Path) -> None:
    policy = Policy(RULES)
    rng = random.Random(SEED)
    lines = [random_line(rng) for _ in range(LINES)]
    allowed = [line for line in lines if isinstance(policy.judge_command(line), Allow)]
    asked = len(lines) - len(allowed)
    work = tmp_path / "work"
    work.mkdir()
    logs = [tmp_path / f"log{number}" for number in range(len(allowed))]
    for log in logs:
        log.mkdir()
    # Only the shims on PATH: any other program bash tried to start would not be found.
    envs = [
        {"PATH": str(shims), "SHIM_LOG": str(log), "HOME": str(tmp_path), "x": "1"} for log in logs
    ]
    run_each(allowed, work, envs)
    for line, log in zip(allowed, logs, strict=True):
        predicted = Counter(policy.parser.parse(line).commands)
        ran = started(log)
        if "||" in line:
            # `a || b` runs b only when a fails; the shims succeed.
            assert not ran - predicted, (line, ran, predicted)
        else:
            assert ran == predicted, (line, ran, predicted)
    # Both kinds were generated in numbers, so the check is not vacuous.
    assert len(allowed) > LINES // 5 and asked > LINES // 5, (len(allowed), asked)
    assert os.listdir(work) == [], "an allowed line wrote a file (a redirection ran)"


# --- the other way: everyday commands run at once, exactly as predicted ---------------------

CORPUS = Path(__file__).parent / "corpus" / "everyday_commands.txt"
# The rules docs/approvals.md recommends ("Recommended rules"): keep the two in step.
RECOMMENDED = [
    *(
        f"git {sub} *"
        for sub in (
            "status", "diff", "log", "show", "blame", "branch", "rev-parse", "ls-files",
            "ls-tree", "grep", "describe", "shortlog", "reflog", "cat-file", "merge-base",
            "show-ref", "for-each-ref", "remote", "tag", "stash", "add", "commit", "switch",
            "checkout",
        )
    ),
    *(
        f"{program} *"
        for program in (
            "ls", "cat", "head", "tail", "wc", "sort", "uniq", "cut", "grep", "rg", "find", "fd",
            "fdfind", "diff", "tree", "stat", "du", "file", "echo", "printf", "which", "jq",
            "pytest", "make",
        )
    ),
    "sed -n *", "pwd", "python -m pytest *", "python3 -m pytest *",
    "npm test *", "npm run *", "npm run-script *", "pnpm test *", "pnpm run *", "pnpm -r test *",
    "yarn test *", "yarn run *", "cargo test *", "cargo build *", "cargo check *",
    "cargo clippy *", "go test *", "go build *", "go vet *",
]  # fmt: skip
BUILTINS = frozenset({"echo", "printf", "pwd", "true", "false", "test", "["})


def corpus() -> list[str]:
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def test_the_corpus_runs_without_a_click_and_exactly_as_predicted(tmp_path: Path) -> None:
    """At least 300 everyday commands: each allowed at once under the recommended rules (0
    needless asks), and each starts exactly the argv the gate predicted (0 differences)."""
    lines = corpus()
    assert len(lines) >= 300, len(lines)
    work = tmp_path / "work"
    work.mkdir()
    policy = Policy(Rules(allow_commands=RECOMMENDED))
    place = Place(workspace=work)
    asked = [
        (line, verdict)
        for line in lines
        if not isinstance(verdict := policy.judge_command(line, place=place), Allow)
    ]
    assert asked == [], f"{len(asked)} needless asks: {asked[:20]}"
    parsed = [policy.parser.parse(line) for line in lines]
    programs = {argv[0] for line in parsed for argv in line.commands} - BUILTINS
    folder = tmp_path / "shims"
    folder.mkdir()
    for name in programs:
        path = folder / name
        path.write_text(SHIM)
        path.chmod(0o755)
    logs = [tmp_path / f"c{number}" for number in range(len(lines))]
    for log in logs:
        log.mkdir()
    envs = [{"PATH": str(folder), "SHIM_LOG": str(log), "HOME": str(tmp_path)} for log in logs]
    run_each(lines, work, envs)
    differences = []
    for line, read, log in zip(lines, parsed, logs, strict=True):
        predicted = Counter(argv for argv in read.commands if argv[0] not in BUILTINS)
        if started(log) != predicted:
            differences.append((line, started(log), predicted))
    assert differences == [], differences[:10]
    assert os.listdir(work) == [], "a corpus line wrote a file in the workspace"
