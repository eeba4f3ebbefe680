"""The table of programs that run programs, and what an allow rule must name to cover them."""

from __future__ import annotations

import pytest

from bridge.core.approvals.rules import parse_rule
from bridge.core.approvals.runners import code_words, sed_script_is_safe


@pytest.mark.parametrize(
    ("rule", "argv"),
    [
        ("find *", ("find", ".", "-exec", "sh", "-c", "id", ";")),
        ("find *", ("find", ".", "-delete")),
        ("find *", ("find", ".", "-fprintf", "out", "%p")),
        ("xargs *", ("xargs", "sh", "-c", "id")),
        ("env *", ("env", "sh")),
        ("timeout *", ("timeout", "5", "sh")),
        ("sudo *", ("sudo", "id")),
        ("git *", ("git", "-c", "core.pager=sh", "log")),
        ("git *", ("git", "--config-env=core.pager=X", "log")),
        ("git *", ("git", "--exec-path=.", "status")),
        ("git *", ("git", "--git-dir=planted", "status")),
        ("git *", ("git", "config", "core.fsmonitor", "x")),
        ("git *", ("git", "difftool", "-x", "sh")),
        ("git *", ("git", "difftool", "--extcmd=sh")),
        ("git *", ("git", "fetch", "--upload-pack=sh", "origin")),
        ("git *", ("git", "push", "--receive-pack", "sh", "origin")),
        ("git *", ("git", "rebase", "-x", "sh", "main")),
        ("git *", ("git", "submodule", "foreach", "id")),
        ("git *", ("git", "clone", "-u", "sh", "a", "b")),
        ("bash *", ("bash", "-lc", "id")),
        ("sh *", ("sh", "-c", "id")),
        ("python3 *", ("python3", "-c", "print(1)")),
        ("node *", ("node", "-e", "1")),
        ("perl *", ("perl", "-ne", "print")),
        ("ruby *", ("ruby", "-e", "1")),
        ("awk *", ("awk", "{print}", "f")),
        ("sed *", ("sed", "1e id", "f")),
        ("sed *", ("sed", "-n", "-e", "s/a/b/w out", "f")),
        ("sed *", ("sed", "-f", "script.sed", "f")),
        ("rg *", ("rg", "--pre", "sh", "x")),
        ("tar *", ("tar", "-I", "sh", "-xf", "a.tar")),
        ("tar *", ("tar", "--to-command=sh", "-xf", "a.tar")),
        ("tar *", ("tar", "xIf", "sh", "a.tar")),
        ("rsync *", ("rsync", "-e", "sh", "a", "b")),
        ("ssh *", ("ssh", "-oProxyCommand=sh", "h")),
        ("test *", ("test", "-v", "a[$(id)]")),
        ("printf *", ("printf", "-v", "a[$(id)]", "x")),
        ("eval *", ("eval", "id")),
        ("command *", ("command", "id")),
        ("read *", ("read", "a[$(id)]")),
        ("cp *", ("cp", "x", ".git/config")),
        ("cp *", ("cp", "notes.txt", "sub/HEAD")),
        ("tee *", ("tee", "docs/AGENTS.md")),
        # abbreviated long options and grouped short ones
        ("git *", ("git", "difftool", "-yx", "sh")),
        ("git *", ("git", "grep", "-nOsh", "x")),
        ("git *", ("git", "grep", "--open-files=sh", "x")),
        ("git *", ("git", "fetch", "--upload-p=sh", "origin")),
        ("git *", ("git", "clone", "-qu", "sh", "a", "b")),
        ("git *", ("git", "clone", "--conf=core.hooksPath=h", "a", "b")),
        ("sed *", ("sed", "-nes/a/b/e", "f")),
        ("sed *", ("sed", "-n", "--expr=s/a/b/e", "f")),
        ("sed *", ("sed", "-n", "--expr", "s/a/b/e", "f")),
        ("sed *", ("sed", "-n", "--fil=x.sed", "f")),
        ("sed *", ("sed", "-nf", "x.sed", "f")),
        ("tar *", ("tar", "--to-com=sh", "-xf", "a.tar")),
        ("tar *", ("tar", "--checkpoint-act=exec=sh", "-xf", "a.tar")),
        ("tar *", ("tar", "--use-compress-prog=sh", "-cf", "x", "a")),
        ("ssh *", ("ssh", "-vo", "ProxyCommand=sh", "h")),
        ("scp *", ("scp", "-vS", "./prog", "a", "h:b")),
        ("rsync *", ("rsync", "--rs=sh", "a", "b")),
        ("less *", ("less", "--lesskey-s=k", "f")),
        ("less *", ("less", "-Nk", "k", "f")),
        ("bat *", ("bat", "--pager=sh", "f")),
        ("sort *", ("sort", "--compress-prog=sh", "f")),
        ("split *", ("split", "--filter=sh", "f")),
        ("man *", ("man", "-C", "evil.conf", "-l", "x.1")),
        ("jobs *", ("jobs", "-x", "id")),
    ],
)
def test_a_star_never_covers_a_word_that_runs_code(rule: str, argv: tuple[str, ...]) -> None:
    assert code_words(argv), argv
    assert not parse_rule(rule).allows(argv)


def test_a_rule_that_names_the_option_allows_it() -> None:
    assert parse_rule("find . -name x -exec *").allows(
        ("find", ".", "-name", "x", "-exec", "wc", "{}", "+")
    )
    assert parse_rule("python3 -c *").allows(("python3", "-c", "print(1)"))
    assert parse_rule("timeout 5 make test").allows(("timeout", "5", "make", "test"))
    assert not parse_rule("timeout 5 make *").allows(("timeout", "5", "make", "test"))


@pytest.mark.parametrize(
    "argv",
    [
        ("find", ".", "-name", "*.py"),
        ("git", "status"),
        ("git", "diff", "HEAD"),
        ("git", "-C", "sub", "log", "--oneline"),
        ("sed", "-n", "1,5p", "f"),
        ("sed", "s/hello/world/g", "f"),
        ("sed", "-e", "s|a|b|", "-e", "/x/d", "f"),
        ("python3", "-m", "pytest", "-q"),
        ("rg", "-n", "pattern"),
        ("tar", "-xzf", "a.tar.gz"),
        ("ls", "-la"),
        ("git", "grep", "-n", "foo"),
        ("git", "grep", "--or", "-e", "a"),
        ("git", "difftool", "--tool-help"),
        ("sed", "-ne", "s/a/b/p", "f"),
        ("sed", "-i.bak", "s/a/b/", "f"),
        ("sed", "--quiet", "--expression=1,5p", "f"),
        ("tar", "-xf", "a.tar", "--checkpoint=1"),
        ("tar", "-tvf", "a.tar"),
        ("ssh", "-v", "-p", "22", "h"),
        ("less", "-N", "README"),
        ("sort", "-u", "f"),
        ("man", "-l", "x.1"),
        ("jobs", "-l"),
    ],
)
def test_ordinary_commands_run_only_themselves(argv: tuple[str, ...]) -> None:
    assert code_words(argv) == []


@pytest.mark.parametrize(
    ("script", "safe"),
    [
        ("s/a/b/", True),
        ("s/a/b/gI", True),
        ("1,5p", True),
        ("/re/d;$q", True),
        ("y/abc/xyz/", True),
        ("s/a/b/e", False),
        ("s/a/b/w out", False),
        ("1e id", False),
        ("r /etc/passwd", False),
        ("w out", False),
        ("s/a", False),
        ("a text", False),
    ],
)
def test_sed_scripts(script: str, safe: bool) -> None:
    assert sed_script_is_safe(script) is safe
