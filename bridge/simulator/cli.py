"""``agy ARGS``: flags, ``--help``, ``--version``, ``models``, and stream-json print mode.

The bridge probes agy (``--help``, ``--version``) before every start: hundreds of processes in
a test run. So this module imports only what a probe needs (``flags``); a command imports the
login, print mode its turns, each on its own path.
"""

from __future__ import annotations

import os
import sys

from bridge.simulator.flags import (
    VERSION,
    UsageError,
    help_text,
    omitted_flags,
    parse_args,
)

TYPE_CHECKING = False  # not typing's: a probe does not import typing
if TYPE_CHECKING:
    from typing import NoReturn

    from bridge.simulator.flags import Options

EXIT_USAGE = 1
EXIT_UNSUPPORTED = 2


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    omitted = omitted_flags(os.environ.get("AGY_SIM_HELP_OMIT"))
    try:
        options = parse_args(args, omitted)
    except UsageError as exc:
        return _fail(f"error: {exc}", EXIT_USAGE)
    if options.help:
        sys.stdout.write(help_text(omitted))
        return 0
    if options.version:
        sys.stdout.write(f"agy {VERSION} (agy-bridge simulator)\n")
        return 0
    if options.commands:
        return _command(options.commands)
    if options.print_prompt is None and os.environ.get("AGY_SIM_DRIVER_MODE") != "1":
        # Without --print agy starts its interactive terminal UI, which a pipe cannot drive.
        # Some later builds run a stream-json "driver mode" without it (AGY_SIM_DRIVER_MODE=1).
        return _fail(
            "error: the interactive UI needs a terminal: pass --print (-p) to run "
            'non-interactively (an empty prompt is --print "")',
            EXIT_USAGE,
        )
    if options.input_format != "stream-json" or options.output_format != "stream-json":
        return _fail(
            "error: the agy simulator implements only stream-json print mode: pass "
            "--input-format stream-json --output-format stream-json",
            EXIT_UNSUPPORTED,
        )
    _exit_now(_print_mode(options))


def _command(commands: list[str]) -> int:
    from bridge.simulator.account import SIGNED_OUT_ERROR, account_error, sign_in
    from bridge.simulator.models import listing

    if commands[:2] == ["auth", "login"]:
        # Real agy signs in through the browser; the simulator just writes its login.
        sys.stdout.write(f"Authenticated as {sign_in()}\n")
        return 0
    if commands[0] != "models":
        return _fail(f'error: unknown command "{commands[0]}" for "agy"', EXIT_USAGE)
    refused = account_error()
    if refused == SIGNED_OUT_ERROR:  # a used-up quota still lists the models
        return _fail(refused, 1)
    sys.stdout.write(listing())
    return 0


def _print_mode(options: Options) -> int:
    from bridge.simulator.process import PrintMode

    try:
        return PrintMode(options).run()
    except KeyboardInterrupt:
        return 1  # SIGINT before the signal handler was installed
    except BrokenPipeError:
        return 1  # the reader of our stdout went away


def _exit_now(code: int) -> NoReturn:
    """Flush and leave at once: daemon threads (stdin, abandoned tool waits) must not delay it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _fail(message: str, code: int) -> int:
    sys.stderr.write(message + "\n")
    return code
