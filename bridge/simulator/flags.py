"""agy's command line as the simulator reads it: pflag rules, agy's flag set, ``--help``.

agy is a Go program (cobra/pflag). Two of pflag's habits matter to a host and are kept here:
a flag that takes a value eats the NEXT argument whatever it looks like (so a bare ``-p``
swallows the flag after it), and an unknown flag ends the process with exit code 1.

The bridge probes agy with ``--help`` and ``--version`` before every start, so this module
(with cli.py) is all a probe loads: plain classes rather than dataclasses (which import
``inspect``), and ``re`` only when a duration is parsed. tests/simulator/test_probe_imports.py
keeps it so.
"""

from __future__ import annotations

from types import MappingProxyType

VERSION = "1.2.17"


class UsageError(Exception):
    """A command line agy would refuse; the message is what follows ``error: ``."""


class Flag:
    __slots__ = ("help", "kind", "name", "short")

    def __init__(self, name: str, kind: str, help: str, short: str = ""):
        self.name = name  # "--print"
        self.kind = kind  # "string", "bool", "list" (repeatable string) or "duration"
        self.help = help
        self.short = short  # "-p"


FLAGS: tuple[Flag, ...] = (
    Flag("--print", "string", "Run non-interactively and print the response", short="-p"),
    Flag(
        "--input-format",
        "string",
        'Input format in print mode: text or stream-json (default "text")',
    ),
    Flag(
        "--output-format",
        "string",
        'Output format in print mode: text, json or stream-json (default "text")',
    ),
    Flag("--add-dir", "list", "Add a workspace directory (repeatable)"),
    Flag("--model", "string", "Model to use (see `agy models`)"),
    Flag("--effort", "string", "Reasoning effort for models that take one"),
    Flag("--mode", "string", "Permission mode: request-review, accept-edits, plan, always-proceed"),
    Flag("--conversation", "string", "Resume the conversation with this id"),
    Flag("--continue", "bool", "Resume the most recent conversation in this directory"),
    Flag("--print-timeout", "duration", "Give up on a print-mode turn after this long (90s, 2m)"),
    Flag("--sandbox", "bool", "Run the agent's commands in a sandbox"),
    Flag(
        "--dangerously-skip-permissions",
        "bool",
        "Never ask for permission (permission mode always-proceed)",
    ),
    Flag("--disable-slash-commands", "bool", "Do not interpret slash commands in prompts"),
    Flag("--agent", "string", "Use this agent definition"),
    Flag("--help", "bool", "help for agy", short="-h"),
    Flag("--version", "bool", "version for agy"),
)

# Flags a test may hide with AGY_SIM_HELP_OMIT; --help itself always stays.
_NEVER_OMITTED = frozenset({"--help"})


class Options:
    """The parsed command line. ``None`` means the flag was not given."""

    def __init__(self) -> None:
        self.print_prompt: str | None = None
        self.input_format: str | None = None
        self.output_format: str | None = None
        self.add_dirs: list[str] = []
        self.model: str | None = None
        self.effort: str | None = None
        self.mode: str | None = None
        self.conversation: str | None = None
        self.resume_latest = False
        self.print_timeout: float | None = None  # seconds
        self.sandbox = False
        self.skip_permissions = False
        self.disable_slash_commands = False
        self.agent: str | None = None
        self.help = False
        self.version = False
        self.commands: list[str] = []


def omitted_flags(env_value: str | None) -> frozenset[str]:
    """``AGY_SIM_HELP_OMIT=--print-timeout,--sandbox`` → flags this build does not have."""
    if not env_value:
        return frozenset()
    names = {part.strip() for part in env_value.split(",") if part.strip()}
    return frozenset(names - _NEVER_OMITTED)


def available_flags(omitted: frozenset[str]) -> tuple[Flag, ...]:
    return tuple(flag for flag in FLAGS if flag.name not in omitted)


def help_text(omitted: frozenset[str]) -> str:
    rows = []
    for flag in available_flags(omitted):
        short = f"{flag.short}, " if flag.short else "    "
        kind = {"string": " string", "list": " stringArray", "duration": " duration"}.get(
            flag.kind, ""
        )
        rows.append((f"  {short}{flag.name}{kind}", flag.help))
    width = max(len(left) for left, _ in rows) + 3
    flag_lines = "\n".join(f"{left.ljust(width)}{text}" for left, text in rows)
    return (
        "Antigravity CLI (agy-bridge simulator)\n\n"
        "Usage:\n  agy [flags]\n  agy [command]\n\n"
        "Available Commands:\n"
        "  models      List the models available to this login\n\n"
        f"Flags:\n{flag_lines}\n\n"
        'Use "agy [command] --help" for more information about a command.\n'
    )


def parse_args(argv: list[str], omitted: frozenset[str]) -> Options:
    """Parse like pflag; raise :class:`UsageError` with agy's wording on a bad command line."""
    flags = available_flags(omitted)
    by_long = {flag.name: flag for flag in flags}
    by_short = {flag.short: flag for flag in flags if flag.short}
    options = Options()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--":
            options.commands.extend(args)
            break
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
            has_value = bool(sep)
            flag = by_long.get(name)
            if flag is None:
                raise UsageError(f"unknown flag: {name}")
            label = name
        elif arg.startswith("-") and len(arg) > 1:
            short, rest = arg[:2], arg[2:]
            flag = by_short.get(short)
            if flag is None:
                raise UsageError(f"unknown shorthand flag: {short[1]!r} in {arg}")
            # pflag: "-pVALUE" and "-p=VALUE" both carry the value.
            has_value, value = bool(rest), rest.removeprefix("=")
            label = f"{short[1]!r} in {short}"
        else:
            options.commands.append(arg)
            continue
        if flag.kind == "bool":
            _set(options, flag, _parse_bool(flag.name, value) if has_value else True)
            continue
        if not has_value:
            if not args:
                raise UsageError(f"flag needs an argument: {label}")
            # Whatever comes next is the value, even another flag: that is how a bare -p
            # swallows the flag after it.
            value = args.pop(0)
        _set(options, flag, _convert(flag, value))
    return options


def _convert(flag: Flag, value: str) -> str | float:
    if flag.kind == "duration":
        try:
            return parse_go_duration(value)
        except ValueError as exc:
            raise UsageError(f'invalid argument "{value}" for "{flag.name}" flag: {exc}') from None
    return value


def _parse_bool(name: str, value: str) -> bool:
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise UsageError(
        f'invalid argument "{value}" for "{name}" flag: '
        f'strconv.ParseBool: parsing "{value}": invalid syntax'
    )


def _set(options: Options, flag: Flag, value: str | float | bool) -> None:
    attr = {
        "--print": "print_prompt",
        "--continue": "resume_latest",
        "--dangerously-skip-permissions": "skip_permissions",
    }.get(flag.name, flag.name.removeprefix("--").replace("-", "_"))
    if flag.kind == "list":
        options.add_dirs.append(str(value))
    else:
        setattr(options, attr, value)


_DURATION_PART = r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)"
_UNIT_SECONDS = MappingProxyType(
    {
        "ns": 1e-9,
        "us": 1e-6,
        "µs": 1e-6,
        "μs": 1e-6,
        "ms": 1e-3,
        "s": 1.0,
        "m": 60.0,
        "h": 3600.0,
    }
)


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` (``90s``, ``2m``, ``1m30s``, ``1.5h``) in seconds."""
    import re  # only here: a probe parses no duration

    part = re.compile(_DURATION_PART)
    body = text.lstrip("+-")
    sign = -1.0 if text.startswith("-") else 1.0
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f'time: invalid duration "{text}"')
    total, pos = 0.0, 0
    while pos < len(body):
        match = part.match(body, pos)
        if match is None:
            if re.match(r"\d+\.?\d*|\.\d+", body[pos:]):
                raise ValueError(f'time: missing unit in duration "{text}"')
            raise ValueError(f'time: invalid duration "{text}"')
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return sign * total
