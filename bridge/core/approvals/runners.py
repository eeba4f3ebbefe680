"""Programs that run programs: options, subcommands and builtins that execute other code.

:func:`code_words` names the argv positions of a plain command that make it run code other
than the program itself (``find -exec``, ``git -c``, ``sh -c``, ``xargs``, ``eval`` …). An allow
rule covers such a command only when its literal words reach every one of those positions: a
final ``*`` never stands for one. For the programs whose every argument may be a command
(``xargs``, ``env``, ``timeout``, ``eval`` …) that means the rule spells the whole command.

An option counts in every spelling its program accepts (:func:`_options`): grouped with
other short options (``-yx``), with its value attached, and abbreviated (``--to-com``).

Arguments naming a protected path (``.git``, ``.agents`` …, see :mod:`paths`) count too,
except for programs that only read: ``cp x .git/config`` under a ``cp *`` rule would plant
configuration that ``git status`` runs.

The table is documented in docs/approvals.md; keep the two in step.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from bridge.core.approvals.paths import names_protected

Argv = Sequence[str]
Found = list[tuple[int, str]]  # (argv position, what it is)

# Every argument may be (or name) a command to run, or the program evaluates its arguments.
WHOLE = frozenset(
    {
        # run their arguments as a command
        "xargs", "env", "nice", "nohup", "timeout", "sudo", "doas", "su", "runuser", "setsid",
        "stdbuf", "flock", "watch", "parallel", "taskset", "ionice", "chrt", "chroot",
        "unshare", "strace", "ltrace", "time", "busybox", "script", "crontab", "at", "batch",
        # awk's program can call system() and open pipes
        "awk", "gawk", "mawk", "nawk",
        # bash builtins that run code or evaluate array subscripts in a name
        "eval", "source", ".", "exec", "command", "builtin", "trap", "let", "declare",
        "typeset", "local", "readonly", "export", "read", "mapfile", "readarray", "unset",
        "getopts", "hash", "enable", "fc", "compgen", "complete", "alias", "shopt",
    }
)  # fmt: skip
# Programs that only read the files they name, so they may name protected paths. Their
# options that run code are in the table all the same (`rg --pre`, `less --lesskey-src`).
READERS = frozenset(
    {"cat", "ls", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "less", "more", "file"}
    | {"stat", "diff", "tree", "du", "nl", "md5sum", "sha1sum", "sha256sum", "bat"}
)
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "fish"})
PYTHONS = ("python", "pypy")
FIND_ACTIONS = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)
# git options before the subcommand: the configuration git runs with, and where it finds it.
GIT_GLOBAL = ("-c", "--config-env", "--exec-path", "--git-dir", "--work-tree")
GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
GIT_SUBCOMMANDS = frozenset(
    {"config", "mergetool", "filter-branch", "send-email", "instaweb", "daemon", "credential"}
)
# Options of any git subcommand that name a program to run.
GIT_ANYWHERE = ("--upload-pack", "--receive-pack", "--exec", "--extcmd", "--template")
GIT_SUBCOMMAND_OPTIONS = MappingProxyType(
    {
        "difftool": ("-x", "--extcmd", "-t", "--tool"),
        "clone": ("-u", "-c", "--config"),
        "rebase": ("-x",),
        "grep": ("-O", "--open-files-in-pager"),
        "submodule": ("foreach",),
        "bisect": ("run",),
    }
)
# man reads its helpers (nroff, the pager …) from a config file: `DEFINE nroff <command>`.
MAN = ("-C", "--config-file", "-P", "--pager", "-H", "--html")
# less runs LESSOPEN (`#env` in a lesskey file) even without a terminal, and writes logs.
LESS = ("-k", "--lesskey-file", "--lesskey-src", "--lesskey-content")
LESS_LOGS = ("-o", "-O", "--log-file", "--LOG-FILE")
TAR = ("-I", "--use-compress-program", "--to-command", "--checkpoint-action", "--info-script")
TAR_MORE = ("-F", "--new-volume-script", "--rsh-command", "--rmt-command")


def code_words(argv: Argv) -> Found:
    """Positions in ``argv`` that run other code (empty: the command runs only itself)."""
    if not argv:
        return []
    program = os.path.basename(argv[0])
    # A file named HEAD makes its folder a repository (`cp notes.txt HEAD`); for git itself
    # HEAD is a revision. Programs that only read may name protected paths.
    head = program != "git"
    found = [
        (i, f"`{word}` names a protected path")
        for i, word in enumerate(argv)
        if i and program not in READERS and names_protected(word, head=head)
    ]
    if program in WHOLE:
        found.append((len(argv) - 1, f"`{program}` runs or evaluates its arguments"))
        return found
    check = _CHECKS.get(program) or _family_check(program)
    if check is not None:
        found += check(argv)
    return found


def _family_check(program: str) -> Callable[[Argv], Found] | None:
    if program.startswith(PYTHONS):
        return _python
    if program.startswith("node") or program in ("nodejs", "deno", "bun"):
        return _node
    if program.startswith(("perl", "ruby")):
        return _options_run_code
    return None


def _options(
    argv: Argv, names: Sequence[str], label: str, start: int = 1, exact: Sequence[str] = ()
) -> Found:
    """Positions of the options ``names`` in every spelling the program accepts: ``-x``,
    ``-xVALUE``, a group of short options holding the letter (``-yx``, ``-vo``), ``--long``,
    ``--long=VALUE``, and any prefix of ``--long`` (``--to-com``: getopt_long, git's
    parse-options and argp take an unambiguous prefix; an ambiguous one is refused by the
    program, so counting every prefix is safe). ``exact``: the program's own options that are
    prefixes of a listed one (tar's ``--checkpoint``), which mean themselves."""
    longs = [name for name in names if name.startswith("--")]
    letters = "".join(name[1] for name in names if len(name) == 2 and name[0] == "-")
    others = [name for name in names if name not in longs and len(name) != 2]
    found = []
    for i in range(start, len(argv)):
        word = argv[i]
        if word == "--":
            break
        if word.startswith("--"):
            head = word.split("=", 1)[0]
            name = next((n for n in longs if len(head) > 2 and n.startswith(head)), None)
            if name is not None and head not in exact:
                found.append((i, f"{label} {name}"))
        elif word.startswith("-") and len(word) > 1:
            hit = next((n for n in others if word.startswith(n)), None)
            hit = hit or next((f"-{c}" for c in word[1:] if c in letters), None)
            if hit is not None:
                found.append((i, f"{label} {hit}"))
    return found


def _short_cluster(argv: Argv, letters: str, label: str) -> Found:
    """Short options given together (``-lc``, ``-ne``) that hold one of ``letters``."""
    found = []
    for i, word in enumerate(argv[1:], start=1):
        if word == "--" or not word.startswith("-"):
            if word == "--":
                break
            continue
        if not word.startswith("--") and any(letter in word[1:] for letter in letters):
            found.append((i, f"{label} {word}"))
    return found


def _find(argv: Argv) -> Found:
    return [(i, f"find {w}") for i, w in enumerate(argv) if w in FIND_ACTIONS]


def _git(argv: Argv) -> Found:
    found: Found = []
    index = 1
    while index < len(argv) and argv[index].startswith("-"):
        word = argv[index]
        if word.startswith(GIT_GLOBAL) or word.startswith(GIT_ANYWHERE):
            found.append((index, f"git {word.split('=')[0]}"))
        index += 2 if word in GIT_VALUE_OPTIONS else 1
    if index >= len(argv):
        return found
    sub = argv[index]
    if sub in GIT_SUBCOMMANDS or sub.startswith("credential-"):
        found.append((index, f"git {sub}"))
    found += _options(argv, GIT_ANYWHERE, f"git {sub}", index + 1)
    extra = GIT_SUBCOMMAND_OPTIONS.get(sub, ())
    words = [w for w in extra if not w.startswith("-")]
    found += [(i, f"git {sub} {w}") for i, w in enumerate(argv) if i > index and w in words]
    found += _options(argv, [w for w in extra if w.startswith("-")], f"git {sub}", index + 1)
    return found


def _shell(argv: Argv) -> Found:
    found = _short_cluster(argv, "ci", os.path.basename(argv[0]))
    return found + _options(argv, ("--rcfile", "--init-file"), os.path.basename(argv[0]))


def _python(argv: Argv) -> Found:
    return _short_cluster(argv, "c", os.path.basename(argv[0]))


def _node(argv: Argv) -> Found:
    names = ("-e", "--eval", "-p", "--print", "-r", "--require", "--import", "--loader")
    return _options(argv, names, os.path.basename(argv[0]))


def _options_run_code(argv: Argv) -> Found:
    # perl and ruby: -e, -E, -M, -n/-p loops, -x … nearly every option can carry code.
    program = os.path.basename(argv[0])
    return [(i, f"{program} {w}") for i, w in enumerate(argv) if i and w.startswith("-")]


SED_LONG_VALUE = ("--line-length",)  # long options whose value may be the next word


def _sed(argv: Argv) -> Found:
    found: Found = []
    scripts: list[tuple[int, str]] = []  # (position, the script)
    index = 1
    while index < len(argv):
        word = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else None
        if word == "--":
            break
        index += 1
        if word.startswith("--"):
            # Any prefix of --expression or --file (`--expr=…`, `--fil x.sed`) is that option.
            head, equals, given = word.partition("=")
            value: str | None = given if equals else None
            if len(head) < 3:
                continue
            if "--expression".startswith(head) or "--file".startswith(head):
                if value is None and following is not None:
                    value, index = following, index + 1
                if "--expression".startswith(head) and value is not None:
                    scripts.append((index - 1, value))
                else:
                    found.append((index - 1, "sed -f (a script file)"))
            elif any(name.startswith(head) for name in SED_LONG_VALUE) and value is None:
                index += 1
            continue
        if not word.startswith("-") or word == "-":
            continue
        # A group of short options (`-ne<script>`, `-nf x.sed`): -e, -f and -l take the rest
        # of the word or the next one; -i takes the rest of the word as its suffix.
        for at, letter in enumerate(word[1:], start=2):
            rest = word[at:]
            if letter == "i":
                break
            if letter in "efl":
                if not rest and following is not None:
                    rest, index = following, index + 1
                if letter == "e":
                    scripts.append((index - 1, rest))
                elif letter == "f":
                    found.append((index - 1, "sed -f (a script file)"))
                break
    if not scripts and not found:
        first = next((i for i, w in enumerate(argv) if i and not w.startswith("-")), None)
        if first is not None:
            scripts.append((first, argv[first]))
    for position, script in scripts:
        if not sed_script_is_safe(script):
            found.append((position, "a sed script that can run commands or write files (e, w, r)"))
    return found


def sed_script_is_safe(script: str) -> bool:
    """Whether a sed script uses only commands that neither run programs nor touch files:
    addresses, ``s`` (without the ``e`` and ``w`` flags), ``y``, ``p d q`` and the like. A
    script this reader does not understand is not safe."""
    index, size = 0, len(script)

    def skip_delimited(at: int, delimiter: str) -> int:
        # From just after an opening delimiter to just after the closing one; -1: unclosed.
        while at < size:
            if script[at] == "\\":
                at += 2
                continue
            if script[at] == delimiter:
                return at + 1
            if script[at] == "\n":
                return -1
            at += 1
        return -1

    def address(at: int) -> int:
        if at < size and script[at] == "/":
            at = skip_delimited(at + 1, "/")
            while 0 <= at < size and script[at] in "IM":
                at += 1
            return at
        while at < size and (script[at].isdigit() or script[at] in "$~+"):
            at += 1
        return at

    while index < size:
        char = script[index]
        if char in " \t\n;":
            index += 1
            continue
        index = address(index)
        if index < 0:
            return False
        if index < size and script[index] == ",":
            index = address(index + 1)
            if index < 0:
                return False
        while index < size and script[index] in " !":
            index += 1
        if index >= size:
            return False
        command = script[index]
        index += 1
        if command in "pdDnNgGhHxlPzF={}=":
            continue
        if command in "qQ":
            while index < size and script[index].isdigit():
                index += 1
            continue
        if command in "s":
            if index >= size or script[index] in "\\\n":
                return False
            delimiter = script[index]
            index = skip_delimited(index + 1, delimiter)
            if index < 0:
                return False
            index = skip_delimited(index, delimiter)
            if index < 0:
                return False
            while index < size and script[index] in "gpiImM0123456789":
                index += 1
            continue
        if command == "y":
            if index >= size:
                return False
            delimiter = script[index]
            index = skip_delimited(index + 1, delimiter)
            index = skip_delimited(index, delimiter) if index >= 0 else -1
            if index < 0:
                return False
            continue
        return False  # e, r, R, w, W, a/i/c text, labels, branches: not read here
    return True


_CHECKS: Mapping[str, Callable[[Argv], Found]] = MappingProxyType(
    {
        **dict.fromkeys(SHELLS, _shell),
        "find": _find,
        "git": _git,
        "sed": _sed,
        "gsed": _sed,
        "rg": lambda argv: _options(argv, ("--pre",), "rg"),
        "tar": lambda argv: (
            _options(argv, TAR + TAR_MORE, "tar", exact=("--checkpoint",)) + _tar_old_style(argv)
        ),
        "rsync": lambda argv: (
            _options(argv, ("--rsh", "--rsync-path"), "rsync") + _short_cluster(argv, "e", "rsync")
        ),
        "ssh": lambda argv: _options(argv, ("-o", "-F"), "ssh"),
        "scp": lambda argv: _options(argv, ("-o", "-F", "-S"), "scp"),
        "sftp": lambda argv: _options(argv, ("-o", "-F", "-S"), "sftp"),
        "test": lambda argv: _options(argv, ("-v", "-R"), "test"),
        "[": lambda argv: _options(argv, ("-v", "-R"), "["),
        "printf": lambda argv: _options(argv, ("-v",), "printf"),
        "wait": lambda argv: _options(argv, ("-p",), "wait"),
        "jobs": lambda argv: _options(argv, ("-x",), "jobs"),  # `jobs -x CMD` runs CMD
        "man": lambda argv: _options(argv, MAN, "man"),
        "less": lambda argv: _options(argv, LESS + LESS_LOGS, "less"),
        "bat": lambda argv: _options(argv, ("--pager",), "bat"),
        "sort": lambda argv: _options(argv, ("--compress-program",), "sort"),
        "split": lambda argv: _options(argv, ("--filter",), "split"),
        "zip": lambda argv: _options(argv, ("-TT", "--unzip-command"), "zip"),
        "vi": lambda argv: _editor(argv),
        "vim": lambda argv: _editor(argv),
        "nvim": lambda argv: _editor(argv),
        "ex": lambda argv: _editor(argv),
        "view": lambda argv: _editor(argv),
        "emacs": lambda argv: _editor(argv),
    }
)


def _tar_old_style(argv: Argv) -> Found:
    # `tar xIf prog …`: the first argument's letters are options without a dash.
    if len(argv) > 1 and not argv[1].startswith("-") and any(c in argv[1] for c in "IF"):
        return [(1, f"tar {argv[1]}")]
    return _short_cluster(argv, "IF", "tar")


def _editor(argv: Argv) -> Found:
    program = os.path.basename(argv[0])
    return [(i, f"{program} {w}") for i, w in enumerate(argv) if i and w.startswith(("-", "+"))]
