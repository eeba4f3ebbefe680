"""The shell reader: which lines are plain, and the argv bash gives each of their commands."""

from __future__ import annotations

import pytest

from bridge.core.approvals.shell import ShellParser


@pytest.fixture(scope="module")
def parser() -> ShellParser:
    return ShellParser()


@pytest.mark.parametrize(
    ("line", "commands"),
    [
        ("git status", [("git", "status")]),
        (
            "ls -la && wc -l x | cat; echo done",
            [("ls", "-la"), ("wc", "-l", "x"), ("cat",), ("echo", "done")],
        ),
        ("echo 'a b' \"c d\" e'f'\"g\"", [("echo", "a b", "c d", "efg")]),
        ("echo '$HOME' '*' \"!x\"", [("echo", "$HOME", "*", "!x")]),
        (r"\rm -rf x \;", [("rm", "-rf", "x", ";")]),
        (
            "git log HEAD^ --format=%h -5 a=b a,b",
            [("git", "log", "HEAD^", "--format=%h", "-5", "a=b", "a,b")],
        ),
        ("echo 'two\nlines'", [("echo", "two\nlines")]),
        ("ls;", [("ls",)]),
    ],
)
def test_plain_lines_and_their_argv(parser: ShellParser, line: str, commands: list) -> None:
    parsed = parser.parse(line)
    assert parsed.plain, parsed.why
    assert list(parsed.commands) == commands


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("echo ${x@P}", "parameter expansion"),
        ("echo $HOME", "parameter expansion"),
        ("echo $(id)", "command substitution"),
        ("echo `id`", "command substitution"),
        ('echo "$x"', "double quotes"),
        ('echo "\\$"', "double quotes"),
        ("echo $((1+2))", "arithmetic"),
        ("echo $[1+2]", "arithmetic"),
        ("echo $'a'", "$'…'"),
        ("echo a{b,c}", "brace expansion"),
        ("echo {1..3}", "brace expansion"),
        ("echo x{a}{b,c}", "brace expansion"),
        ("make prefix=~/x", "`~`"),
        ("echo a:~", "`~`"),
        ("ls *.py", "`*`"),
        ("ls ?", "`?`"),
        ("ls [ab]", "`[`"),
        ("ls ~/x", "`~`"),
        ("ls > out", "redirection"),
        ("ls 2>&1", "redirection"),
        ("cat <<< x", "here-string"),
        ("x=1 ls", "assignment"),
        ("(ls)", "subshell"),
        ("ls &", "background"),
        ("ls |& cat", "stderr"),
        ("ls\nid", "newline"),
        ("echo a\\\nb", "`\\`"),
        ("ls # c", "comment"),
        ("time ls", "keyword"),
        ("! ls", "negated"),
        ("[ -f x ]", "test"),
        ("export A=1", "declaration"),
        ("f() { id; }", "function"),
        ("echo 'open", "grammar"),
        ("", "empty"),
    ],
)
def test_lines_that_are_not_plain(parser: ShellParser, line: str, why: str) -> None:
    parsed = parser.parse(line)
    assert not parsed.plain and why in parsed.why, parsed.why


def test_every_simple_command_is_found_for_deny_rules(parser: ShellParser) -> None:
    parsed = parser.parse("echo $(rm -rf /) && x=1 /bin/rm -fr $HOME > log")
    assert ("rm", "-rf", "/") in parsed.loose
    assert ("/bin/rm", "-fr", None) in parsed.loose


def test_a_very_long_line_is_read_without_exhausting_the_stack(parser: ShellParser) -> None:
    parsed = parser.parse(" && ".join(["ls"] * 20_000))
    assert parsed.plain and len(parsed.commands) == 20_000


def test_a_nul_character_is_not_plain(parser: ShellParser) -> None:
    # bash stops reading at the NUL: the gate would judge a line bash never runs.
    assert "NUL" in parser.parse("ls\x00 -la").why


@pytest.mark.parametrize(
    ("line", "argv"),
    [
        ("git diff HEAD~1", ("git", "diff", "HEAD~1")),
        ("git show HEAD~2:src/app.py", ("git", "show", "HEAD~2:src/app.py")),
        ("git log main..HEAD~3", ("git", "log", "main..HEAD~3")),
        ("git diff stash@{0}", ("git", "diff", "stash@{0}")),
        ("git log @{u}..", ("git", "log", "@{u}..")),
        ("git log HEAD@{1}..HEAD", ("git", "log", "HEAD@{1}..HEAD")),
        ("git show HEAD^{tree}", ("git", "show", "HEAD^{tree}")),
        ("git log HEAD^", ("git", "log", "HEAD^")),
        ("echo a=b", ("echo", "a=b")),
        ("find . -name x -print {}", ("find", ".", "-name", "x", "-print", "{}")),
    ],
)
def test_words_bash_leaves_untouched_are_plain(line: str, argv: tuple[str, ...]) -> None:
    """`~` not at a word's start (nor after `=` or `:`), `{…}` with no comma or range."""
    parsed = ShellParser().parse(line)
    assert parsed.plain, parsed.why
    assert parsed.commands == (argv,)
