"""Chat commands: parsing (``parse.py``), the registry (``registry.py``) and the commands, one
decorated function each in the package's other modules (all imported here, so a new command is
one function in one file)."""

from __future__ import annotations

import importlib
import pkgutil

from bridge.core.command_text import PREFIX, Command, parse
from bridge.core.commands.registry import REGISTRY, Who, command, run_command

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

# What !help says, with every command of the package registered.
HELP = REGISTRY.help_text()


def parse_command(text: str) -> Command | None:
    """A command when the message is ``!word [argument]`` (``Command.name`` "unknown" for a word
    no command has); None for an ordinary message."""
    return parse(text, REGISTRY.names())


__all__ = [
    "HELP",
    "PREFIX",
    "REGISTRY",
    "Command",
    "Who",
    "command",
    "parse_command",
    "run_command",
]
