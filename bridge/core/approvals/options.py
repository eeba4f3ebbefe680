"""Options allowed by name: what each option of a known program does, read as it reads it.

Under an allow rule's ``*`` an option is accepted only when the program's table (and the
subcommand's, for ``git``) knows it as one that neither writes nor runs anything. An option
the table does not know asks; so does one the table marks ``ask`` (it runs something, or
writes where the gate cannot judge). An option marked ``write`` names a file the program
writes: it is judged as a write by a file tool would be (:mod:`policy`).

Every spelling the program accepts is read (:func:`scan`): ``--opt=X`` and ``--opt X``, an
unambiguous prefix of a long option (``--out=X`` for ``--output``; getopt_long and git's
parse-options take one), grouped short options (``-nr``), a short option's value attached
(``-oX``, ``-t.git``) or in the next word, ``-NUM`` where the program takes it (``head -5``),
git's ``--no-…`` negations, and ``--`` ending the options.

A table is written in a small language (:func:`parse_spec`), one token per option:

- ``-x`` / ``--long``: a flag;
- ``-x=`` / ``--long=``: takes a value (attached, or the next word);
- ``--long=?``: an optional value (only attached: ``--color=always``);
- ``--long==``: two values in the next two words (``jq --arg name value``);
- ``-o=write``: the value is a path the program writes;
- ``-x!`` / ``--long=!``: known, but always asks (runs a program, opens an editor, writes
  where no path says);
- ``-x>`` / ``--long=?>``: the program writes its operands (``sed -i``): each is judged as a
  write;
- ``@read``, ``@all``, ``@last``, ``@second``, ``@of``: which operands (the words that are
  not options) the program writes: none, every one (``touch``, ``rm``, ``tee``; removing is
  writing, so ``mv`` too), the last when there are two or more (``cp``, ``ln``, ``install``),
  the second (``uniq IN OUT``, ``split IN PREFIX``), or the value of ``of=`` (``dd``). A
  program without a table, and a table that does not say, writes every operand (a word that
  is no path names a file of the workspace, which is fine; a path outside it asks).

The shipped tables are in :mod:`option_tables`; an operator adds options (or programs) with
``[approvals] options`` in the same language (docs/approvals.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

Takes = Literal["no", "yes", "optional", "two"]
Kind = Literal["plain", "write", "ask", "operands"]
Writes = Literal["read", "all", "last", "second", "of"]
WRITES: tuple[Writes, ...] = ("read", "all", "last", "second", "of")
# How a program reads its options.
#   gnu: getopt_long (grouped short options, attached values, abbreviated long options);
#   git: the same, and `--no-<option>`;
#   clap: grouped short options and attached values, long options only whole (ripgrep, fd);
#   single: one dash before long names (`find -name`), no grouping, no abbreviation;
#   go: Go's flag package (`-flag`, `--flag`, `-flag=x`, `-flag x`), no grouping;
#   words: no options at all (every word is an argument: `echo`).
Style = Literal["gnu", "git", "clap", "single", "go", "words"]


class SpecError(ValueError):
    """An option table that cannot be read; the message names the token."""


@dataclass(frozen=True)
class Option:
    name: str
    takes: Takes = "no"
    kind: Kind = "plain"


@dataclass(frozen=True)
class Table:
    """The options of one program, or of one subcommand (``git log``)."""

    name: str
    source: str
    options: Mapping[str, Option]
    style: Style = "gnu"
    digits: bool = False  # `-NUM` is an option (`head -5`, `git log -3`)
    subcommands: bool = False  # the first word that is not an option picks `<name> <word>`
    writes: Writes = "all"  # which operands the program writes (see the module's docstring)


@dataclass(frozen=True)
class Finding:
    """One word the table does not let a rule's ``*`` cover: ``kind`` is ``unknown`` (not in
    the table), ``ask`` (known to run or write) or ``write`` (``value`` is a path written)."""

    position: int
    kind: Literal["unknown", "ask", "write"]
    what: str
    value: str = ""


@dataclass(frozen=True)
class Scan:
    findings: tuple[Finding, ...] = ()
    # Every value an option took, with its position (checked for protected and secret paths
    # like any other argument: `-X/root/.gemini/oauth_creds.json`).
    values: tuple[tuple[int, str], ...] = ()
    known: bool = True  # whether the program has a table at all
    program: str = ""  # the table read last (`git clone`)
    # The operands (words that are no option nor an option's value), and those written.
    operands: tuple[tuple[int, str], ...] = ()
    written: tuple[tuple[int, str], ...] = ()


def parse_spec(text: str) -> dict[str, Option]:
    """The options of a table written in the spec language (see the module's docstring)."""
    options: dict[str, Option] = {}
    for token in text.split():
        if token.startswith("@"):
            if token[1:] not in WRITES:
                raise SpecError(f"`{token}`: operands are one of @{', @'.join(WRITES)}")
            continue
        name, equals, rest = token.partition("=")
        takes: Takes = "no"
        kind: Kind = "plain"
        if not equals and name.endswith("!"):
            name, kind = name[:-1], "ask"
        elif not equals and name.endswith(">"):
            name, kind = name[:-1], "operands"
        elif equals:
            takes = "yes"
            if rest.startswith("="):
                takes, rest = "two", rest[1:]
            elif rest.startswith("?"):
                takes, rest = "optional", rest[1:]
            if rest in ("write", "!", ">"):
                kind = "write" if rest == "write" else "ask" if rest == "!" else "operands"
            elif rest:
                raise SpecError(f"`{token}`: after `=` only `?`, `write`, `!` or `>`")
        if not name.startswith("-") or len(name) < 2 or name.startswith("---"):
            raise SpecError(f"`{token}`: an option starts with `-` or `--`")
        options[name] = Option(name, takes, kind)
    return options


def spec_writes(text: str) -> Writes | None:
    """The operands a spec says the program writes (``@last`` …), or None when it says not."""
    found = [token[1:] for token in text.split() if token.startswith("@")]
    return next((w for w in WRITES if found and w == found[-1]), None)


@dataclass
class Tables:
    """Every program's table, by name (``sort``, ``git log``)."""

    by_name: dict[str, Table] = field(default_factory=dict)
    # Programs with no table of options whose written operands are known (`cp`: the last).
    writes: Mapping[str, Writes] = field(default_factory=dict)

    def get(self, name: str) -> Table | None:
        return self.by_name.get(name)

    def extended(self, extra: Mapping[str, str]) -> Tables:
        """These tables with an operator's options added (``{"mytool": "-v -o=write"}``); a
        program without a table gets one (style gnu)."""
        merged = dict(self.by_name)
        for name, spec in extra.items():
            key = " ".join(name.split())
            added = parse_spec(spec)
            writes = spec_writes(spec)
            old = merged.get(key)
            if old is None:
                source = "[approvals] options"
                writes = writes or self.writes.get(key, "all")
                merged[key] = Table(key, source, MappingProxyType(added), writes=writes)
            else:
                options = {**old.options, **added}
                source = f"{old.source}; [approvals] options"
                merged[key] = Table(
                    key,
                    source,
                    MappingProxyType(options),
                    old.style,
                    old.digits,
                    old.subcommands,
                    writes or old.writes,
                )
        return Tables(merged, self.writes)


def scan(argv: tuple[str, ...] | list[str], program: str, tables: Tables) -> Scan:
    """How the program reads ``argv``'s options, and which of them a rule's ``*`` must not
    cover. A program without a table has every option unknown."""
    table = tables.get(program)
    known = table is not None
    if table is None:
        table = Table(program, "", MappingProxyType({}), writes=tables.writes.get(program, "all"))
    scanner = _Scanner(argv, table, tables)
    scanner.run()
    operands = tuple(scanner.operands)
    return Scan(
        tuple(scanner.findings),
        tuple(scanner.values),
        known=known,
        program=scanner.table.name,
        operands=operands,
        written=written(operands, "all" if scanner.writes_operands else scanner.table.writes),
    )


def written(operands: tuple[tuple[int, str], ...], writes: Writes) -> tuple[tuple[int, str], ...]:
    """The operands a program that writes ``writes`` writes (with their positions)."""
    if writes == "all":
        return operands
    if writes == "last":
        return operands[-1:] if len(operands) > 1 else ()
    if writes == "second":
        return operands[1:2]
    if writes == "of":
        return tuple((i, word[3:]) for i, word in operands if word.startswith("of="))
    return ()


class _Scanner:
    def __init__(self, argv: tuple[str, ...] | list[str], table: Table, tables: Tables):
        self.argv = argv
        self.table = table
        self.tables = tables
        self.findings: list[Finding] = []
        self.values: list[tuple[int, str]] = []
        self.operands: list[tuple[int, str]] = []
        self.writes_operands = False  # an option made the operands written (`sed -i`)
        self.index = 1

    def run(self) -> None:
        argv = self.argv
        while self.index < len(argv):
            word = argv[self.index]
            style = self.table.style
            if word == "--" and style != "words":
                self.operands += [(i, argv[i]) for i in range(self.index + 1, len(argv))]
                return
            if style == "words" or not word.startswith("-") or word == "-":
                self._positional(word)
            elif self.table.digits and word[1:].isdigit():
                pass
            elif style in ("gnu", "git", "clap") and word.startswith("--"):
                self._long(word)
            elif style in ("gnu", "git", "clap"):
                self._short(word)
            else:
                self._single(word)
            self.index += 1

    def _positional(self, word: str) -> None:
        if self.table.subcommands:
            name = f"{self.table.name} {word}"
            sub = self.tables.get(name)
            # An unknown subcommand has every option unknown, and writes every operand.
            self.table = sub or Table(name, "", MappingProxyType({}), self.table.style)
        else:
            self.operands.append((self.index, word))

    def _note(self, kind: Literal["unknown", "ask"], word: str, name: str = "") -> None:
        what = (
            f"`{word}` is not an option the gate knows for `{self.table.name}`"
            if kind == "unknown"
            else f"`{self.table.name} {name or word}` runs or writes something"
        )
        self.findings.append(Finding(self.index, kind, what))

    def _take(self, option: Option, value: str | None, word: str) -> None:
        """The option found at ``self.index``; ``value`` attached, or None (then the next
        word when the option needs one)."""
        start = at = self.index
        if value is None and option.takes == "yes" and self.index + 1 < len(self.argv):
            self.index += 1
            at, value = self.index, self.argv[self.index]
        elif option.takes == "two":
            # `jq --arg name value`: two words, neither a path the program writes.
            self.values += [(i, self.argv[i]) for i in range(at + 1, min(at + 3, len(self.argv)))]
            self.index = min(at + 2, len(self.argv) - 1)
            return
        if value is not None and option.takes == "no":
            self._note("unknown", word)  # the program refuses it; nothing to judge
            return
        if value is not None:
            self.values.append((at, value))
        if option.kind == "operands":
            self.writes_operands = True
        elif option.kind == "ask":
            what = f"`{self.table.name} {option.name}` runs or writes something"
            self.findings.append(Finding(start, "ask", what))
        elif option.kind == "write" and value is not None:
            self.findings.append(
                Finding(at, "write", f"`{self.table.name} {option.name}` writes `{value}`", value)
            )

    def _long(self, word: str) -> None:
        head, equals, given = word.partition("=")
        value = given if equals else None
        option = self._resolve_long(head)
        if option is None:
            self._note("unknown", word)
            return
        self._take(option, value, word)

    def _resolve_long(self, head: str) -> Option | None:
        options = self.table.options
        if head in options:
            return options[head]
        negated = self.table.style == "git" and head.startswith("--no-")
        if negated and "--" + head[5:] in options:
            # `--no-<option>` turns an option off: it takes nothing and does nothing.
            return Option(head)
        if self.table.style == "clap":
            return None
        longs = [name for name in options if name.startswith("--")]
        candidates = [options[name] for name in longs if name.startswith(head)]
        if negated:
            rest = "--" + head[5:]
            candidates += [Option(head) for name in longs if name.startswith(rest)]
        if len(head) > 2 and len({(c.takes, c.kind) for c in candidates}) == 1:
            # An unambiguous prefix (or several options that mean the same to the gate).
            return candidates[0]
        return None

    def _short(self, word: str) -> None:
        options = self.table.options
        for at in range(1, len(word)):
            option = options.get("-" + word[at])
            if option is None:
                self._note("unknown", word, "-" + word[at])
                return
            rest = word[at + 1 :]
            if option.takes == "no":
                self._take(option, None, word)
                continue
            # A value: the rest of the word, else (when required) the next word.
            self._take(option, rest if rest or option.takes == "optional" else None, word)
            return

    def _single(self, word: str) -> None:
        options = self.table.options
        if self.table.style == "go" and word.startswith("--"):
            word = word[1:]
        if word in options:
            self._take(options[word], None, word)
            return
        head, equals, given = word.partition("=")
        if self.table.style == "go" and equals and head in options:
            self._take(options[head], given, word)
            return
        self._note("unknown", word)


def table_entries(tables: Tables) -> Iterable[Table]:
    return tables.by_name.values()
