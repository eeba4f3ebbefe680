"""A ``run_command`` line read with a real shell grammar (tree-sitter's bash grammar).

Only *plain* lines can ever run without a person: simple commands made of words and quoted
strings with no expansion of any kind, joined by ``&&``, ``||``, ``;`` or ``|``. For those the
parser gives each command's argv exactly as bash would build it. Everything else (``$``, a
backtick, globs, braces, a tilde, redirections, assignments, subshells, here-documents, a
comment, a newline between commands, anything the grammar does not recognise) is not plain,
and the gate asks.

For deny rules the parser also gives a best-effort argv of every simple command anywhere in
the line, plain or not, with ``None`` for a word it cannot know before bash runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import MappingProxyType

import tree_sitter
import tree_sitter_bash

Argv = tuple[str, ...]
LooseArgv = tuple[str | None, ...]

# Characters that mean nothing to bash in an unquoted word (letters and digits aside).
_SAFE = frozenset("_@%+=:,./-^")
_SEPARATORS = MappingProxyType({"program": (";",), "list": ("&&", "||"), "pipeline": ("|",)})
_ARGUMENTS = frozenset({"word", "number", "string", "raw_string", "concatenation"})
# Parts of a command that are not among its words.
_NOT_WORDS = frozenset(
    {"variable_assignment", "file_redirect", "heredoc_redirect", "herestring_redirect", "comment"}
)
# Reserved words: as a command's first word they are syntax, not a program (``time ls``).
RESERVED = frozenset(
    "! { } [[ ]] case coproc do done elif else esac fi for function if in select then time "
    "until while".split()
)


class NotPlain(Exception):
    """The line (or a part of it) is not plain; the message says what was seen."""


@dataclass(frozen=True)
class Line:
    """What the parser made of one command line."""

    text: str
    commands: tuple[Argv, ...] = ()  # every simple command's argv, when the line is plain
    why: str = ""  # why the line is not plain ("" when it is)
    loose: tuple[LooseArgv, ...] = ()  # every simple command found anywhere, best effort

    @property
    def plain(self) -> bool:
        return not self.why


class ShellParser:
    """One tree-sitter parser; make one per policy object (creating it costs more than a
    parse, and a parser is not shared between threads)."""

    def __init__(self) -> None:
        self._parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))

    def parse(self, text: str) -> Line:
        source = text.encode("utf-8")
        root = self._parser.parse(source).root_node
        loose = tuple(_loose_commands(root, source))
        if not text.strip():
            return Line(text, why="an empty line", loose=loose)
        if "\x00" in text:
            # bash never sees past a NUL (argv is a C string): what it runs is not this line.
            return Line(text, why="a NUL character", loose=loose)
        try:
            if root.has_error:
                raise NotPlain("a line the shell grammar does not accept")
            commands = list(_statement_list(root, source))
            _check_gaps(root, source)
        except NotPlain as exc:
            return Line(text, why=str(exc), loose=loose)
        if not commands:
            return Line(text, why="no command", loose=loose)
        return Line(text, commands=tuple(commands), loose=loose)


def _statement_list(root: tree_sitter.Node, source: bytes) -> Iterator[Argv]:
    """The commands under ``program``, ``list`` and ``pipeline`` nodes, in order. Iterative:
    a line of ten thousand ``&&`` must not exhaust Python's stack."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in _SEPARATORS:
            separators = _SEPARATORS[node.type]
            stack.extend(reversed([c for c in node.children if c.type not in separators]))
        elif node.type == "command":
            yield _command(node, source)
        else:
            raise NotPlain(f"{_label(node.type)} (`{_text(node, source)}`)")


def _command(node: tree_sitter.Node, source: bytes) -> Argv:
    children = node.children
    if not children or children[0].type != "command_name":
        raise NotPlain(f"{_label(children[0].type) if children else 'an empty command'}")
    name = children[0].children
    if len(name) != 1 or name[0].type not in _ARGUMENTS:
        raise NotPlain(f"a command name that is not a plain word (`{_text(children[0], source)}`)")
    argv = [_argument(name[0], source)]
    if argv[0] in RESERVED or argv[0] in ("{", "}"):
        raise NotPlain(f"the shell keyword `{argv[0]}`")
    _check_braces(_text(name[0], source))
    for child in children[1:]:
        if child.type not in _ARGUMENTS:
            raise NotPlain(f"{_label(child.type)} (`{_text(child, source)}`)")
        argv.append(_argument(child, source))
        _check_braces(_text(child, source))
    return tuple(argv)


def _check_braces(raw: str) -> None:
    """A word with braces is plain when no pair of them holds a brace expansion: a `,` or a
    `..` between a `{` and its `}` (`a{b,c}`, `{1..3}`), or another brace. `stash@{0}`,
    `@{u}..`, `HEAD^{tree}` and find's `{}` are left alone by bash. Read on the word as
    written, quotes and all (a quoted brace never expands; asking for it is only cautious)."""
    if "{" not in raw:
        return
    start = raw.find("{")
    while start >= 0:
        end = raw.find("}", start + 1)
        if end < 0:
            return  # an unmatched `{` is a literal
        inside = raw[start + 1 : end]
        if "," in inside or ".." in inside or "{" in inside:
            raise NotPlain(f"a brace expansion (`{raw}`)")
        start = raw.find("{", end + 1)


def _argument(node: tree_sitter.Node, source: bytes) -> str:
    """The literal value bash gives a plain word; NotPlain for anything it would expand."""
    kind = node.type
    if kind in ("word", "number"):
        return _unquoted(_text(node, source))
    if kind == "raw_string":
        text = _text(node, source)
        if len(text) < 2 or text[0] != "'" or text[-1] != "'":
            raise NotPlain(f"an unclosed quote (`{text}`)")
        return text[1:-1]
    if kind == "string":
        if any(c.type not in ('"', "string_content") for c in node.children):
            raise NotPlain(f"an expansion inside double quotes (`{_text(node, source)}`)")
        text = _text(node, source)
        inner = text[1:-1]
        if len(text) < 2 or text[0] != '"' or text[-1] != '"' or any(c in inner for c in "$`\\"):
            raise NotPlain(f"`$`, a backtick or a backslash inside double quotes (`{text}`)")
        return inner
    if kind == "concatenation":
        parts, end = [], node.start_byte
        for child in node.children:
            if child.start_byte != end or child.type not in _ARGUMENTS - {"concatenation"}:
                raise NotPlain(f"a word the shell would expand (`{_text(node, source)}`)")
            parts.append(_argument(child, source))
            end = child.end_byte
        return "".join(parts)
    raise NotPlain(f"{_label(kind)} (`{_text(node, source)}`)")


def _unquoted(text: str) -> str:
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 >= len(text) or text[index + 1] == "\n":
                raise NotPlain("a backslash at the end of a line")
            out.append(text[index + 1])
            index += 2
            continue
        # bash leaves `~` alone except at a word's start (and after `=` or `:`, where it
        # expands in assignments and in words that look like one: `make prefix=~/x`), and
        # `{`/`}` unless they hold a brace expansion (checked on the whole word).
        tilde = char == "~" and index > 0 and text[index - 1] not in "=:"
        if not (char.isalnum() or char in _SAFE or tilde or char in "{}"):
            raise NotPlain(f"`{char}`, which the shell would expand or read as syntax (`{text}`)")
        out.append(char)
        index += 1
    return "".join(out)


def _check_gaps(root: tree_sitter.Node, source: bytes) -> None:
    """Nothing between the grammar's tokens but blanks: a byte the grammar skipped (a line
    continuation, a stray character) could mean something to bash."""
    end = 0
    for leaf in _leaves(root):
        gap = source[end : leaf.start_byte]
        if gap.strip(b" \t"):
            if not gap.strip():
                raise NotPlain("a newline between commands")
            raise NotPlain(f"`{gap.decode('utf-8', 'replace').strip()}` between words")
        end = leaf.end_byte
    if source[end:].strip(b" \t"):
        raise NotPlain("something after the last command")


def _leaves(root: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
    """The tokens of the tree in order (quoted strings and words whole), iteratively."""
    stack = [root]
    while stack:
        node = stack.pop()
        if not node.children or node.type in ("raw_string", "string", "word", "number"):
            yield node
        else:
            stack.extend(reversed(node.children))


def _loose_commands(root: tree_sitter.Node, source: bytes) -> Iterator[LooseArgv]:
    """Every simple command in the tree (inside substitutions, subshells and the rest too)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "command":
            argv: list[str | None] = []
            for child in node.children:
                if child.type == "command_name":
                    only = child.children[0] if len(child.children) == 1 else None
                    argv.append(_maybe(only, source) if only is not None else None)
                elif child.type in _ARGUMENTS:
                    argv.append(_maybe(child, source))
                elif child.type not in _NOT_WORDS:
                    argv.append(None)  # a word bash builds when it runs ($x, $(…), …)
            if argv:
                yield tuple(argv)
        elif node.type in ("declaration_command", "unset_command"):
            words = [_maybe(c, source) if c.type in _ARGUMENTS else None for c in node.children]
            if words and words[0] is None:
                words[0] = _text(node.children[0], source)
            yield tuple(words)
        stack.extend(reversed(node.children))


def _maybe(node: tree_sitter.Node, source: bytes) -> str | None:
    try:
        return _argument(node, source)
    except NotPlain:
        return None


def _text(node: tree_sitter.Node, source: bytes) -> str:
    return source[node.start_byte : node.end_byte].decode("utf-8", "replace")


_LABELS = MappingProxyType(
    {
        "redirected_statement": "a redirection",
        "file_redirect": "a redirection",
        "heredoc_redirect": "a here-document",
        "herestring_redirect": "a here-string",
        "variable_assignment": "an assignment",
        "subshell": "a subshell",
        "command_substitution": "a command substitution",
        "process_substitution": "a process substitution",
        "expansion": "a parameter expansion",
        "simple_expansion": "a parameter expansion",
        "arithmetic_expansion": "an arithmetic expansion",
        "brace_expression": "a brace expansion",
        "comment": "a comment",
        "&": "a command sent to the background",
        "|&": "a pipe of stderr",
        "negated_command": "a negated command",
        "test_command": "a test expression",
        "declaration_command": "a declaration",
        "unset_command": "unset",
        "function_definition": "a function definition",
        "ansi_c_string": "a $'…' string",
        "translated_string": 'a $"…" string',
    }
)


def _label(kind: str) -> str:
    return _LABELS.get(kind, f"shell syntax ({kind})")
