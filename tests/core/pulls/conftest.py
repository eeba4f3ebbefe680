"""The forge tests' git remote and fake GitHub, for the core's pull request tests."""

from tests.forge.conftest import remote, session

__all__ = ["remote", "session"]
