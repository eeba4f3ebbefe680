"""What this agy build can do, read once from ``agy --help``.

Seed 004: an unknown flag makes agy exit non-zero and fail the whole turn, so optional flags are
sent only when ``--help`` advertises them. A probe that fails is not fatal.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import anyio
from pydantic import BaseModel, ConfigDict

log = logging.getLogger(__name__)

# Flags the bridge cannot work without. When the probe fails entirely we still send these
# (every build since stream-json input, 1.1.15, has them) and say so.
ESSENTIAL_FLAGS = frozenset(
    {
        "--print",
        "--input-format",
        "--output-format",
        "--add-dir",
        "--conversation",
        "--model",
        "--dangerously-skip-permissions",
    }
)
KNOWN_FLAGS = (
    *sorted(ESSENTIAL_FLAGS),
    "--print-timeout",
    "--sandbox",
    "--mode",
    "--effort",
    "--disable-slash-commands",
    "--continue",
    "--agent",
    "--json-schema",
)
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


class Capabilities(BaseModel):
    model_config = ConfigDict(frozen=True)

    flags: frozenset[str] = frozenset()
    probed: bool = False  # False: --help failed; only the essential flags are assumed
    version: str = ""
    problem: str = ""

    def has(self, flag: str) -> bool:
        if not self.probed:
            return flag in ESSENTIAL_FLAGS
        return flag in self.flags

    @property
    def missing_essential(self) -> list[str]:
        return sorted(f for f in ESSENTIAL_FLAGS if not self.has(f))


def parse_help(text: str) -> frozenset[str]:
    return frozenset(match for match in _FLAG.findall(text) if match in KNOWN_FLAGS)


async def _run(argv: Sequence[str], seconds: float) -> tuple[int | None, str, str]:
    try:
        with anyio.fail_after(seconds):
            done = await anyio.run_process(list(argv), check=False)
    except TimeoutError:
        return None, "", f"{argv[0]} {' '.join(argv[1:])} did not answer within {seconds:g} s"
    except OSError as exc:
        return None, "", f"cannot run {argv[0]}: {exc.strerror or exc}"
    return (
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


async def probe(command: Sequence[str], seconds: float) -> Capabilities:
    """Run ``agy --help`` (and ``--version``) under ``seconds``; never raises."""
    code, out, err = await _run([*command, "--help"], seconds)
    if code is None:
        log.warning("agy --help failed (%s); sending only the essential flags", err)
        return Capabilities(problem=err)
    flags = parse_help(out + "\n" + err)
    if not flags:
        problem = f"agy --help advertised no known flag (exit {code})"
        log.warning("%s; sending only the essential flags", problem)
        return Capabilities(problem=problem)
    vcode, vout, _ = await _run([*command, "--version"], seconds)
    version = vout.strip().splitlines()[0] if vcode == 0 and vout.strip() else ""
    return Capabilities(flags=flags, probed=True, version=version)
