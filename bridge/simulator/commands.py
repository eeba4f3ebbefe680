"""``run_command``: a real ``bash -c`` child (agy's agent shell), left in the simulator's
process group.

Real agy does not kill its ``run_command`` children on SIGINT: they can outlive it, and the
host must clean up agy's process group. So the child is not put in a session of its own, and
waiting for it happens on a daemon thread (``Waits.call``) that an interrupt simply abandons.
"""

from __future__ import annotations

import subprocess


def run_command(command: str, cwd: str) -> tuple[int, str]:
    """Exit status and combined stdout/stderr of ``bash -c command`` (blocks until it ends)."""
    proc = subprocess.Popen(
        # bash, as agy runs it: `${x@P}`, `$'…'`, arrays and brace expansion work (and can
        # be abused) as they do for the real agent; `sh` is dash on Debian.
        ["bash", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output, _ = proc.communicate()
    return proc.returncode, output.decode("utf-8", "replace")
