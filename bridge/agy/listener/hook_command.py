"""The ``sh -c`` lines written into ``hooks.json``: curl posts the hook input to the listener.

Three deadlines nest, each inside the next, so every party always gets a usable answer:
the listener answers within :func:`answer_deadline` (its fallback when the bridge's hook
function is slower), curl gives up at ``--max-time`` (the command then prints its own
fallback), and agy kills the handler at its ``timeout`` (then agy logs a failure).

The URL carries the session's token, so it is never on a command line (any local user can read
every process's argv in ``ps``): curl reads it from a config file (``-K``) that the bridge
writes beside ``hooks.json``, in the plugin folder the sandbox shows read-only.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path

# agy must never wait on a bridge that is gone: connecting to loopback either works at once or
# not at all, so two seconds is plenty.
CONNECT_TIMEOUT_SECONDS = 2.0
# curl stops this long before agy's own hook timeout, so agy always gets our fallback rather
# than killing the hook (and logging a failure) itself.
_MARGIN_SECONDS = 2.0
# The listener answers this long before curl's --max-time (a quarter of it for short hooks), so
# an answer is never in flight while curl gives up: a reply curl did not read would be lost.
_ANSWER_MARGIN_SECONDS = 5.0
# agy's default hook timeout; the bridge's PreInvocation hook uses it too.
DEFAULT_HOOK_TIMEOUT_SECONDS = 10
# A PreToolUse handler waits for a person: agy's timeout for it sits this far above the
# approval timeout, so the bridge's own "timed out, denied" answer arrives first.
_TOOL_HOOK_SLACK_SECONDS = 10

# What the PreToolUse command prints when the listener gave no decision. agy fails closed
# anyway, but an explicit deny tells the model why, in words it can pass on.
UNREACHABLE_DENIAL = (
    '{"decision":"deny","reason":"the bridge could not be reached to approve this tool call, '
    'so it was not run"}'
)


def curl_max_time(timeout_seconds: int) -> float:
    """curl's ``--max-time`` for a handler agy kills after ``timeout_seconds``."""
    if timeout_seconds < 1:
        raise ValueError("a hook timeout is at least one second")
    return timeout_seconds - min(_MARGIN_SECONDS, timeout_seconds * 0.2)


def answer_deadline(timeout_seconds: int) -> float:
    """How long the listener may take to answer a handler with this agy timeout."""
    max_time = curl_max_time(timeout_seconds)
    margin = min(_ANSWER_MARGIN_SECONDS, max(1.0, max_time * 0.25))
    return max(0.2, max_time - margin)


@dataclass(frozen=True)
class ToolHookTiming:
    """Deadlines of the PreToolUse hook for one approval timeout (all in seconds)."""

    hook_timeout: int  # agy's handler timeout, written into hooks.json
    answer_within: float  # the listener's deadline (give it to Listener.register)


def tool_hook_timing(approval_timeout: float) -> ToolHookTiming:
    """Deadlines above an approval timeout: a person may take ``approval_timeout`` to decide,
    the listener answers just after it at the latest, curl and agy wait a little longer. All
    count from the hook call's arrival (the decision's window too: ``ToolCall.arrived``)."""
    if approval_timeout < 0:
        raise ValueError("an approval timeout cannot be negative")
    hook_timeout = math.ceil(approval_timeout) + _TOOL_HOOK_SLACK_SECONDS
    return ToolHookTiming(hook_timeout=hook_timeout, answer_within=answer_deadline(hook_timeout))


def url_file_text(url: str) -> str:
    """The curl config file (``curl -K``) that gives curl the hook URL, token included."""
    if any(ch in url for ch in "\n\r"):
        raise ValueError("a hook URL has no line break")
    # A double-quoted curl config string takes backslash escapes as JSON does.
    return f"url = {json.dumps(url)}\n"


def url_file_name(event: str) -> str:
    """The file, beside ``hooks.json``, holding the URL of one hook event."""
    return f"{event}.curl"


def _curl(url_file: Path, timeout_seconds: int) -> str:
    max_time = curl_max_time(timeout_seconds)
    connect_time = min(CONNECT_TIMEOUT_SECONDS, max_time)
    return " ".join(
        [
            # -q first: ignore ~/.curlrc, whose options could change what is sent or printed.
            # The URL (with its token) comes from the file, never from argv.
            f"curl -q -K {shlex.quote(str(url_file))} -s -f",
            # A proxy from the environment must never see a loopback URL with a token in it.
            "--noproxy '*'",
            f"--connect-timeout {connect_time:g}",
            f"--max-time {max_time:g}",
            "-X POST -H 'Content-Type: application/json'",
            "--data-binary @-",
        ]
    )


def hook_command(url_file: Path, timeout_seconds: int) -> str:
    """A shell command that posts stdin to the URL in ``url_file`` (see :func:`url_file_text`)
    and prints the answer, or ``{}`` on any failure.

    agy parses a hook's output strictly, so the command prints either the listener's whole
    answer or exactly ``{}``: curl's output is captured first and printed only when curl
    succeeded (``-f`` turns HTTP errors such as 404 or 413 into a failure too). The command
    always reads its whole stdin.
    """
    # On failure stdin is drained too: when curl never ran (not installed), agy's write of the
    # hook input must not meet a closed pipe.
    return (
        f"out=$({_curl(url_file, timeout_seconds)} 2>/dev/null) && printf '%s' \"$out\""
        " || { cat >/dev/null 2>&1; printf '{}'; }"
    )


def tool_hook_command(url_file: Path, timeout_seconds: int) -> str:
    """The ``PreToolUse`` variant: it ALWAYS prints an explicit decision, never ``{}``.

    The listener's answer is printed when curl succeeded and it holds a decision; otherwise
    (the bridge is gone, an HTTP error, no decision in the answer) the command prints a
    ``deny`` whose reason says the bridge could not be reached. Use
    :func:`tool_hook_timing` for a ``timeout_seconds`` above the approval timeout.
    """
    return (
        f"out=$({_curl(url_file, timeout_seconds)} 2>/dev/null)"
        ' && case "$out" in *\'"decision"\'*) printf \'%s\' "$out" ;; *) false ;; esac'
        f" || {{ cat >/dev/null 2>&1; printf '%s' {shlex.quote(UNREACHABLE_DENIAL)}; }}"
    )
