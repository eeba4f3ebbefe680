"""The ``sh -c`` line written into ``hooks.json``: curl posts the hook input to the listener."""

from __future__ import annotations

import shlex

# agy must never wait on a bridge that is gone: connecting to loopback either works at once or
# not at all, so two seconds is plenty.
CONNECT_TIMEOUT_SECONDS = 2.0
# curl stops this long before agy's own hook timeout, so agy always gets our `{}` rather than
# killing the hook (and logging a failure) itself.
_MARGIN_SECONDS = 2.0


def hook_command(url: str, timeout_seconds: int) -> str:
    """A shell command that posts stdin to ``url`` and prints the answer, or ``{}`` on any failure.

    agy parses a hook's output strictly, so the command prints either the listener's whole
    answer or exactly ``{}``: curl's output is captured first and printed only when curl
    succeeded (``-f`` turns HTTP errors such as 404 or 413 into a failure too). The command
    always reads its whole stdin.
    """
    if timeout_seconds < 1:
        raise ValueError("a hook timeout is at least one second")
    margin = min(_MARGIN_SECONDS, timeout_seconds * 0.2)
    max_time = timeout_seconds - margin
    connect_time = min(CONNECT_TIMEOUT_SECONDS, max_time)
    curl = " ".join(
        [
            # -q first: ignore ~/.curlrc, whose options could change what is sent or printed.
            "curl -q -s -f",
            # A proxy from the environment must never see a loopback URL with a token in it.
            "--noproxy '*'",
            f"--connect-timeout {connect_time:g}",
            f"--max-time {max_time:g}",
            "-X POST -H 'Content-Type: application/json'",
            "--data-binary @-",
            shlex.quote(url),
        ]
    )
    # On failure stdin is drained too: when curl never ran (not installed), agy's write of the
    # hook input must not meet a closed pipe.
    return (
        f"out=$({curl} 2>/dev/null) && printf '%s' \"$out\""
        " || { cat >/dev/null 2>&1; printf '{}'; }"
    )
