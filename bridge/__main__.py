"""`python -m bridge` is the `agy-bridge` command."""

from bridge.command import command

command()
