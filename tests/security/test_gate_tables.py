"""Every entry of the gate's tables that runs code (or writes) has a case that fails without it.

The cases are generated from the tables themselves, so an entry dropped from a table (``zip``,
``nice``) or an option turned plain fails here, and a new entry without an example fails too.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from bridge.core.approvals.option_tables import shipped
from bridge.core.approvals.options import Table, scan
from bridge.core.approvals.policy import Allow, Ask, Policy, Rules
from bridge.core.approvals.runners import _CHECKS, WHOLE, code_words
from bridge.core.approvals.shell import ShellParser

TABLES = shipped()
CORPUS = Path(__file__).parent / "corpus"


def _listed(name: str) -> list[list[str]]:
    lines = (CORPUS / name).read_text(encoding="utf-8").splitlines()
    return [line.split("\t") for line in lines if line and not line.startswith("#")]


# Written down, not derived from the tables: a dropped entry must fail.
WHOLE_LISTED = [row[0] for row in _listed("programs_that_run_arguments.txt")]
ASKING_LISTED = [tuple(row) for row in _listed("options_that_ask.txt")]
WRITING_LISTED = [tuple(row) for row in _listed("operands_written.txt")]


def test_the_lists_hold_every_entry() -> None:
    assert set(WHOLE_LISTED) == set(WHOLE)
    assert set(ASKING_LISTED) == set(_ask_and_write_options())
    assert set(WRITING_LISTED) == set(_operand_writers())


def _operand_writers() -> list[tuple[str, str]]:
    tables = [(n, t.writes) for n, t in TABLES.by_name.items() if t.writes != "read"]
    return sorted([*tables, *TABLES.writes.items()])


@pytest.mark.parametrize(("program", "writes"), WRITING_LISTED)
def test_every_operand_a_program_writes_is_judged_so(program: str, writes: str) -> None:
    """Generated from the tables: turning a program's operands to `read` lets a write outside
    the workspace through; it fails here."""
    words = program.split()
    target = "/elsewhere/x"
    argv = [*words, "of=" + target if writes == "of" else target]
    if writes in ("last", "second"):
        argv = [*words, "source", target]
    table = TABLES.get(program)
    assert (table.writes if table else TABLES.writes.get(program)) == writes
    result = scan(argv, argv[0], TABLES)
    assert target in [word for _, word in result.written], (argv, result)
    verdict = Policy(Rules(allow_commands=[f"{program} *"])).judge_command(shlex.join(argv))
    assert isinstance(verdict, Ask) and "writes" in verdict.preview, verdict


@pytest.mark.parametrize("program", WHOLE_LISTED)
def test_every_program_that_runs_its_arguments_asks_under_a_star(program: str) -> None:
    # A spelling that is a plain command: `declare x` is a declaration to the grammar, and
    # `\declare x` the builtin all the same; `time` is a keyword, `/usr/bin/time` the program.
    parser = ShellParser()
    for head in (shlex.quote(program), "\\" + program, f"/usr/bin/{program}"):
        line = f"{head} touch pwned"
        parsed = parser.parse(line)
        if parsed.plain:
            break
    assert parsed.plain, parsed.why
    name = shlex.quote(parsed.commands[0][0])
    verdict = Policy(Rules(allow_commands=[f"{name} *"])).judge_command(line)
    assert isinstance(verdict, Ask), (line, verdict)
    assert "runs or evaluates its arguments" in verdict.preview
    # Spelled out whole, the rule allows it.
    exact = Policy(Rules(allow_commands=[f"{name} touch pwned"]))
    assert isinstance(exact.judge_command(line), Allow)


# One command per program of the runners' table that uses what runs code.
RUNNER_CASES = {
    **{shell: f"{shell} -c x" for shell in ("sh", "bash", "zsh", "dash", "ksh", "mksh", "fish")},
    "find": "find . -exec x {} +",
    "git": "git -c core.pager=x log",
    "sed": "sed '1e touch x' f",
    "gsed": "gsed -n '1e touch x' f",
    "rg": "rg --pre=x y",
    "tar": "tar --to-command=x -xf a.tar",
    "rsync": "rsync -e x a b",
    "ssh": "ssh -o ProxyCommand=x h",
    "scp": "scp -S x a b",
    "sftp": "sftp -S x h",
    "test": "test -v 'a[$(x)]'",
    "[": "[ -v x ]",
    "printf": "printf -v x y",
    "wait": "wait -p x",
    "jobs": "jobs -x x",
    "man": "man -P x y",
    "less": "less --lesskey-src=k f",
    "bat": "bat --pager=x f",
    "sort": "sort --compress-program=sh f",
    "split": "split --filter=x f",
    "zip": "zip -TT x a.zip f",
    **{editor: f"{editor} +x f" for editor in ("vi", "vim", "nvim", "ex", "view", "emacs")},
}
FAMILY_CASES = ["python3 -c x", "pypy3 -c x", "node -e x", "deno --eval x", "perl -e x"]


def test_every_runner_entry_has_a_case() -> None:
    assert set(RUNNER_CASES) == set(_CHECKS)


@pytest.mark.parametrize("line", [*RUNNER_CASES.values(), *FAMILY_CASES])
def test_every_runner_entry_is_what_asks(line: str) -> None:
    argv = shlex.split(line)
    found = code_words(argv)
    assert found, f"{argv[0]}: its runners entry no longer finds anything in {line!r}"
    policy = Policy(Rules(allow_commands=[f"{shlex.quote(argv[0])} *"]))
    assert isinstance(policy.judge_command(line), Ask)


def _ask_and_write_options() -> list[tuple[str, str, str]]:
    cases = []
    for name, table in TABLES.by_name.items():
        for option in table.options.values():
            if option.kind != "plain":
                cases.append((name, option.name, option.kind))
    return sorted(cases)


def _argv(table: Table, name: str) -> list[str]:
    option = table.options[name]
    words = table.name.split()
    if option.takes == "optional":
        return [*words, f"{name}=/elsewhere/x"]
    if option.takes in ("yes", "two"):
        return [*words, name, "/elsewhere/x"]
    return [*words, name]


@pytest.mark.parametrize(("table", "name", "kind"), ASKING_LISTED)
def test_every_option_that_runs_or_writes_is_judged_so(table: str, name: str, kind: str) -> None:
    """Generated from the tables: dropping an entry makes the option unknown (it still asks,
    but for another reason) and turning it plain lets it through; both fail here."""
    entry = TABLES.by_name[table]
    assert name in entry.options, f"{table} {name}: no longer in its table"
    argv = _argv(entry, name)
    if kind == "operands":
        # `sed -i SCRIPT FILE`: the operands are written (judged as writes, not asked at once).
        argv = [*entry.name.split(), name, "s/a/b/", "/elsewhere/x"]
        result = scan(argv, argv[0], TABLES)
        assert not result.findings and ("/elsewhere/x" in dict(result.written).values())
        return
    result = scan(argv, argv[0], TABLES)
    kinds = {finding.kind for finding in result.findings}
    assert kinds == {kind}, (argv, result.findings)


def test_the_tables_name_their_sources() -> None:
    for table in TABLES.by_name.values():
        assert "Debian 12" in table.source or "not packaged in Debian 12" in table.source, table
