"""Allow and deny rules: lists of words, as an operator writes them in ``[approvals]``.

A rule is split as the shell would split it (``shlex``). A command's argv must start with the
rule's words; a final ``*`` (a word of its own) stands for zero or more further arguments, and
never extends a word: ``git diff *`` allows ``git diff --stat``, not ``git difftool``. Words the
program uses to run other code (:mod:`runners`) must be named by the rule, never by its ``*``.

The old form, a ``*`` glued to a word (``git diff*``) or inside a rule (``cat *.py``), meant a
glob over the whole line; such a rule is refused with its replacement, since the old meaning
cannot be kept. Stored "always" rows written as escaped globs (``make test[[]unit]``) meant
one exact line, and are converted.

Deny rules are a convenience, not a boundary: they are matched on every simple command of the
parsed line, the program by its base name (``/bin/rm`` and ``\\rm`` are ``rm``), options in any
order and grouping (``-rf``, ``-fr``, ``-r -f``, ``--recursive --force``, abbreviated as
``--rec --forc``), but a command built
at run time (``$cmd``, ``eval``) cannot be known before it runs.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from bridge.core.approvals.runners import code_words

_OLD_ESCAPE = re.compile(r"\[([*?\[])\]")
# Marks the stored "always" rows written since rules are word lists (:func:`stored_row`).
STORED_MARK = "rule: "
# Long options that mean a short one, per program (for deny rules).
_ALIASES = MappingProxyType(
    {
        "rm": {"--recursive": "-r", "-R": "-r", "--force": "-f"},
        # `--force-if-includes` only forces with `--force-with-lease`; both are a force here.
        "git": {"--force": "-f", "--force-with-lease": "-f", "--force-if-includes": "-f"},
        "chmod": {"--recursive": "-R"},
        "chown": {"--recursive": "-R"},
    }
)
# Programs that run the command in their arguments: deny rules look at that command too.
_WRAPPERS = frozenset(
    {"sudo", "doas", "env", "nice", "nohup", "timeout", "xargs", "command", "builtin", "exec"}
    | {"time", "stdbuf", "setsid", "ionice", "chrt", "taskset", "flock", "watch", "unshare"}
)


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


class RuleError(ValueError):
    """A rule that cannot be used; the message names it and its replacement."""


@dataclass(frozen=True)
class CommandRule:
    text: str
    words: tuple[str, ...]
    star: bool = False

    def allows(self, argv: Sequence[str]) -> bool:
        """``argv`` starts with the rule's words (and has no more unless the rule ends in
        ``*``), and every word that makes it run other code is one of the rule's own."""
        return self.covers(argv, code_words(argv))

    def covers(self, argv: Sequence[str], found: Iterable[tuple[int, str]]) -> bool:
        """Like :meth:`allows`, with the positions that a ``*`` must not cover given (the
        programs that run programs, and options the gate does not know or that write)."""
        count = len(self.words)
        if tuple(argv[:count]) != self.words or (len(argv) > count and not self.star):
            return False
        return all(position < count for position, _ in found)

    def denies(self, argv: Sequence[str | None]) -> bool:
        """Whether a (best-effort) argv is a command this deny rule names."""
        return any(self._denies(argv[start:]) for start in _starts(argv))

    def _denies(self, argv: Sequence[str | None]) -> bool:
        if not argv or argv[0] is None or program(argv[0]) != program(self.words[0]):
            return False
        name = program(self.words[0])
        rule_options, rule_words = _split(name, self.words[1:])
        options, words = _split(name, argv[1:])
        # An abbreviated long option (`--forc`) is every rule option it could stand for.
        options |= {
            wanted
            for wanted in rule_options
            for given in options
            if wanted.startswith("--") and len(given) > 2 and wanted.startswith(given)
        }
        if not rule_options <= options:
            return False
        if self.star:
            return _subsequence(rule_words, words)
        return len(rule_words) == len(words) and all(
            w is None or w == r for r, w in zip(rule_words, words, strict=True)
        )


def program(word: str) -> str:
    return os.path.basename(word)


def _starts(argv: Sequence[str | None]) -> list[int]:
    """Where a command may start in ``argv``: at 0, after ``find -exec``, and after a wrapper
    at any later word that is not an option or an assignment (``sudo rm …``, ``timeout 5
    rm …``)."""
    if argv and argv[0] is not None and program(argv[0]) == "find":
        return [0] + [i + 1 for i, word in enumerate(argv) if word in _FIND_EXEC]
    if not argv or argv[0] is None or program(argv[0]) not in _WRAPPERS:
        return [0]
    return [0] + [
        index
        for index, word in enumerate(argv)
        if index and word is not None and not word.startswith("-") and "=" not in word
    ]


def _split(name: str, words: Sequence[str | None]) -> tuple[set[str], list[str | None]]:
    """(options, other words): ``-rf`` gives ``-r`` and ``-f``; ``--x=1`` gives ``--x``."""
    aliases = _ALIASES.get(name, {})
    options: set[str] = set()
    rest: list[str | None] = []
    for index, word in enumerate(words):
        if word == "--":
            rest += words[index + 1 :]
            break
        if word is None or not word.startswith("-") or word == "-" or word[1:].isdigit():
            rest.append(word)
            if name == "git" and word is not None and word.startswith("+"):
                options.add("-f")  # `git push origin +main` forces that refspec
        elif word.startswith("--"):
            long = word.split("=", 1)[0]
            # getopt_long and git take any unambiguous prefix (`--rec`, `--forc`).
            known = [name for name in aliases if name.startswith(long) and len(long) > 2]
            if known:
                options.update(aliases[name] for name in known)
            else:
                options.add(long)
        else:
            for letter in word[1:]:
                short = "-" + letter
                options.add(aliases.get(short, short))
    return options, rest


def _subsequence(wanted: Sequence[str | None], words: Sequence[str | None]) -> bool:
    found = iter(words)
    return all(any(w is None or w == want for w in found) for want in wanted)


def _unquoted_globs(text: str) -> list[int]:
    """Positions of ``*``, ``?`` and ``[`` outside quotes and not escaped."""
    found, quote, index = [], "", 0
    while index < len(text):
        char = text[index]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            index += 1
        elif quote == '"':
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char in "*?[":
            found.append(index)
        index += 1
    return found


def parse_rule(text: str) -> CommandRule:
    """A rule from its text; :class:`RuleError` when it is empty, names no program, or uses
    the old glob form (the message then gives the replacement)."""
    stripped = text.strip()
    try:
        words = shlex.split(stripped)
    except ValueError as exc:
        raise RuleError(f"`{text}`: {exc}") from None
    globs = _unquoted_globs(stripped)
    star = bool(globs) and globs[-1] == len(stripped) - 1 and stripped[-2:-1] in ("", " ", "\t")
    if star:
        globs, words = globs[:-1], words[:-1]
    if not words:
        raise RuleError(f"`{text}`: a rule must start with the program it allows")
    if globs:
        raise RuleError(
            f"`{text}`: a `*` (or `?`, `[`) glued to a word or inside a rule no longer "
            f"matches part of a word (`git diff*` also matched `git difftool`); write "
            f"`{_replacement(words)}` (those words, then any arguments) or list the exact "
            "commands"
        )
    return CommandRule(text=stripped, words=tuple(words), star=star)


def _replacement(words: Sequence[str]) -> str:
    kept: list[str] = []
    for word in words:
        if any(c in word for c in "*?["):
            head = re.split(r"[*?\[]", word, maxsplit=1)[0]
            if head and word.endswith("*") and word.count("*") == 1 and "?" not in word:
                kept.append(head)
            break
        kept.append(word)
    return shlex.join(kept or ["program"]) + " *"


def parse_rules(texts: Iterable[str]) -> tuple[CommandRule, ...]:
    return tuple(parse_rule(text) for text in texts)


def exact_rule(argv: Sequence[str]) -> str:
    """The rule that allows exactly this command (what "always" stores)."""
    return shlex.join(argv)


def stored_row(rule: str) -> str:
    """How an "always" rule is stored: marked, so that it is never taken for a row written
    before rules were word lists (``grep -E 'a[*]b' f`` holds a literal ``[*]``)."""
    return STORED_MARK + rule


def shown_row(row: str) -> str:
    """A stored row as the thread sees it (``!approvals``): the rule's own text."""
    return row.removeprefix(STORED_MARK)


def stored_rule(text: str) -> CommandRule:
    """A thread's stored "always" row as a rule. A marked row (:func:`stored_row`) is the
    rule as written. Unmarked rows were written before: those that escaped the glob
    characters of one exact line (``[*]``) are that line's words, converted; others are read
    as rules. :class:`RuleError` for a row whose meaning is not certain."""
    if text.startswith(STORED_MARK):
        return parse_rule(text.removeprefix(STORED_MARK))
    if _OLD_ESCAPE.search(text) and not _unquoted_globs(_OLD_ESCAPE.sub("", text)):
        line = _OLD_ESCAPE.sub(r"\1", text)
        try:
            words = tuple(shlex.split(line))
        except ValueError as exc:
            raise RuleError(f"`{text}`: {exc}") from None
        if words:
            return CommandRule(text=text, words=words)
        raise RuleError(f"`{text}`: an empty rule")
    return parse_rule(text)
