"""What one plain command does beyond what an allow rule's words say, position by position.

:func:`findings` joins the two tables: the programs that run programs (:mod:`runners`) and
the options each known program takes (:mod:`options`, :mod:`option_tables`). A finding at a
position the rule's own words reach is the rule's choice; one under its ``*`` asks. An option
that writes a file (``sort -o``, ``git log --output``), and an operand the program writes
(``cp a DEST``, ``tee FILE``, ``dd of=FILE``, every operand of a program the gate does not
know), is judged as a write by a file tool is: to an ordinary file of the thread's workspace
it is fine, anywhere else (or to a protected path) it is a finding.

:func:`secret_word` names a word that reads a secret (agy's login, the bridge's own files,
``[approvals] secret_paths``): that asks whatever the program, and is never allowed always.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bridge.core.approvals.options import Scan, Tables, scan
from bridge.core.approvals.paths import protected_write
from bridge.core.approvals.runners import code_words

Found = list[tuple[int, str]]

# Programs that read no file's contents (only names, sizes, dates): a folder that holds a
# secret may be named to them (`ls /`, `find / -name x`, `du -sh ..`).
NAMES_ONLY = frozenset({"ls", "stat", "du", "tree", "find", "fd", "fdfind", "pwd", "which"})
NAMES_ONLY |= frozenset({"echo", "printf", "file", "wc", "git", "test", "["})


@dataclass(frozen=True)
class Where:
    """Where a command runs and may write without asking."""

    cwd: Path
    roots: tuple[Path, ...]  # resolved: the workspace, agy's artifact folder
    secrets: tuple[Path, ...] = ()  # resolved secret paths (files or folders)


def findings(argv: Sequence[str], tables: Tables, where: Where | None) -> Found:
    """(position, why) for every word a rule's ``*`` must not cover."""
    found = list(code_words(argv))
    program = os.path.basename(argv[0])
    offset, scanned = 0, argv
    if program.startswith(("python", "pypy")) and len(argv) > 2 and argv[1] == "-m":
        # `python -m pytest -q`: the module's table reads what follows the module.
        module = tables.get(argv[2])
        if module is not None:
            offset, scanned, program = 2, argv[2:], argv[2]
    if program == "tar" and len(argv) > 1 and argv[1][:1] not in ("-", ""):
        # The rest is read as usual; positions move by the word taken out.
        found += _tar_old_style(argv, tables)
        return found + _judged(scan([argv[0], *argv[2:]], program, tables), where, 1)
    result = scan(list(scanned), program, tables)
    found += _judged(result, where, offset)
    return found


def _judged(result: Scan, where: Where | None, offset: int) -> Found:
    found: Found = []
    for finding in result.findings:
        position = finding.position + offset
        if finding.kind != "write":
            found.append((position, finding.what))
            continue
        why = _write_problem(finding.value, where)
        if why is not None:
            found.append((position, f"{finding.what}, {why}"))
    for position, word in result.written:
        # An operand the program writes (`cp a DEST`, `tee FILE`, `dd of=FILE`).
        why = _write_problem(word, where)
        if why is not None:
            found.append((position + offset, f"`{result.program}` writes `{word}`, {why}"))
    return found


def _write_problem(value: str, where: Where | None) -> str | None:
    """Why a write to ``value`` must ask (None: an ordinary file of the workspace)."""
    if where is None or not value:
        return "and the gate does not know the workspace"
    path = Path(os.path.realpath(os.path.join(where.cwd, value)))
    for root in where.roots:
        if within(path, root):
            if is_secret(path, where):
                return "a secret path"
            why = protected_write(str(path), str(root))
            return None if why is None else f"a protected path ({why})"
    return "outside the thread's workspace"


def _tar_old_style(argv: Sequence[str], tables: Tables) -> Found:
    """`tar cf x.tar …`: the first word's letters are options, their values the next words.
    Letters the table does not know, and any letter that takes a value, ask."""
    table = tables.get("tar")
    options = table.options if table is not None else {}
    for letter in argv[1]:
        option = options.get("-" + letter)
        if option is None or option.takes != "no" or option.kind != "plain":
            return [(1, f"`tar {argv[1]}`: old-style options with values (write `tar -{argv[1]}`)")]
    return []


def secret_word(argv: Sequence[str], where: Where | None) -> str | None:
    """A word of ``argv`` (or the value after its ``=``, or a short option's attached value)
    that names a secret path, or, for a program that reads contents, a folder holding one."""
    if where is None or not where.secrets:
        return None
    program = os.path.basename(argv[0])
    holds = program not in NAMES_ONLY
    for word in argv[1:]:
        for candidate in _candidates(word):
            path = Path(os.path.realpath(os.path.join(where.cwd, candidate)))
            if is_secret(path, where):
                return word
            if holds and any(below(s, path) for s in where.secrets):
                return word
    return None


def _candidates(word: str) -> list[str]:
    found = [word]
    if "=" in word:
        found.append(word.split("=", 1)[1])
    if word.startswith("-") and not word.startswith("--") and len(word) > 2:
        # `-f/root/.gemini/x`, `-X/etc/…`: any attached value.
        found += [word[i:] for i in range(2, min(len(word), 4))]
    return [c for c in found if c]


def within(path: Path, root: Path) -> bool:
    """``path`` is ``root`` or lies inside it (both resolved, so compared word by word:
    ``root in path.parents`` made a Path of every parent, 50 µs when it is not one, and the
    gate asks for every word of a command against every secret path)."""
    words = root.parts
    return path.parts[: len(words)] == words


def below(path: Path, root: Path) -> bool:
    """``path`` lies inside ``root`` and is not ``root`` itself."""
    return len(path.parts) > len(root.parts) and within(path, root)


def _under_any(path: Path, roots: Sequence[Path]) -> bool:
    return any(within(path, root) for root in roots)


def is_secret(path: Path, where: Where) -> bool:
    """Whether the resolved ``path`` is (inside) a secret path. The thread's own workspace may
    lie inside one (the data directory holds the default workspaces): that part is not."""
    for secret in where.secrets:
        if within(path, secret):
            inside_own = any(within(path, root) and below(root, secret) for root in where.roots)
            if not inside_own:
                return True
    return False
