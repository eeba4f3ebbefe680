"""Running hook handlers and reading their replies the way agy does.

A handler runs under ``sh -c`` in the folder of its ``hooks.json``, with the simulator's
environment plus ``ANTIGRAVITY_CONVERSATION_ID``, the camelCase hook input on stdin, and is
killed after its timeout. Its stdout is parsed like protojson. ``PreInvocation``: the exit code
is ignored; the reply is a JSON object whose only key is ``injectSteps``, a list of objects
holding exactly one of ``userMessage``, ``ephemeralMessage`` (strings) or ``toolCall``; anything
else, duplicate keys included, discards the whole reply. ``PreToolUse``: the reply is exactly
``{"decision": ..., "reason": ...}`` and agy fails closed: a nonzero exit (as recorded on
1.1.24), a timeout, an unknown key, no JSON or no decision all keep the tool from running.

The functions that run a handler block until it ends: the context calls them on a thread
(``Waits.call``), so SIGINT and the turn's deadline still end the wait for them.
"""

from __future__ import annotations

import json
import os
import subprocess

from bridge.simulator.plugins import HookHandler
from bridge.simulator.record import field, record

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from typing import Any

_STEP_KINDS = ("userMessage", "ephemeralMessage", "toolCall")
DECISIONS = ("allow", "deny", "ask", "force_ask")
DENIED_BY_HOOK = "Tool call denied by pre-tool hook: "


class BadHookReply(ValueError):
    """Why agy would discard a hook's whole reply."""


@record
class HookRun:
    """One handler's run: its raw stdout, and the steps it injects when the reply is valid."""

    stdout: str
    user_messages: list[str] = field(default_factory=list)
    ephemeral_messages: list[str] = field(default_factory=list)
    error: str | None = None  # set when the reply was discarded or the handler failed


def hook_input(
    *,
    conversation_id: str,
    workspace_paths: list[str],
    transcript_path: str,
    artifact_dir: str,
    model_name: str,
    invocation_num: int,
    initial_num_steps: int,
) -> dict[str, Any]:
    """What agy writes to a ``PreInvocation`` handler's stdin. The prompt is not in it."""
    return {
        "conversationId": conversation_id,
        "workspacePaths": workspace_paths,
        "transcriptPath": transcript_path,
        "artifactDirectoryPath": artifact_dir,
        "modelName": model_name,
        "invocationNum": invocation_num,
        "initialNumSteps": initial_num_steps,
    }


def tool_hook_input(
    common: dict[str, Any], tool: str, args: dict[str, Any], step_idx: int
) -> dict[str, Any]:
    """What agy writes to a ``PreToolUse`` handler: the common fields, the call, its step."""
    return {**common, "toolCall": {"name": tool, "args": args}, "stepIdx": step_idx}


@record(frozen=True)
class ToolVerdict:
    """The outcome of a tool call's ``PreToolUse`` handlers."""

    allowed: bool
    message: str = ""  # tool_info.error.message of the refused step
    hook_failed: bool = False  # a failing handler (not a decision): the turn's result is ERROR


ALLOWED = ToolVerdict(allowed=True)


def run_tool_handler(
    handler: HookHandler, payload: dict[str, Any], conversation_id: str
) -> ToolVerdict:
    """One ``PreToolUse`` handler, read strictly; anything but ``allow`` refuses the call."""
    env = dict(os.environ, ANTIGRAVITY_CONVERSATION_ID=conversation_id)
    data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    failed = f'JSON hook "{handler.name}" failed: '
    try:
        code, stdout, stderr = _run_full(handler, env, data)
    except subprocess.TimeoutExpired:
        return _failure(failed + f"timed out after {handler.timeout:g}s")
    except OSError as exc:
        return _failure(failed + f"command failed to start: {exc}")
    if code != 0:
        tail = stderr.decode("utf-8", "replace")
        return _failure(failed + f"command failed: exit status {code}, stderr: {tail}")
    try:
        decision, reason = parse_decision(stdout)
    except BadHookReply as exc:
        return _failure(failed + f"invalid output: {exc}")
    if decision == "allow":
        return ALLOWED
    # deny; or ask/force_ask, agy's own prompt, which print mode cannot show: not allowed.
    return ToolVerdict(allowed=False, message=DENIED_BY_HOOK + reason)


def _failure(message: str) -> ToolVerdict:
    return ToolVerdict(allowed=False, message=message, hook_failed=True)


def parse_decision(raw: bytes) -> tuple[str, str]:
    """``(decision, reason)`` of a PreToolUse reply; raise :class:`BadHookReply` like protojson
    (an unknown key, no JSON, a decision missing or not one of agy's four)."""
    try:
        data = json.loads(raw, object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadHookReply(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadHookReply("not a JSON object")
    unknown = sorted(set(data) - {"decision", "reason"})
    if unknown:
        raise BadHookReply(f"unknown field {unknown[0]!r}")
    decision, reason = data.get("decision"), data.get("reason", "")
    if decision not in DECISIONS:
        raise BadHookReply(f"no decision (one of {', '.join(DECISIONS)}) in the reply")
    if not isinstance(reason, str):
        raise BadHookReply("reason is not a string")
    return str(decision), reason


def run_handler(handler: HookHandler, payload: dict[str, Any], conversation_id: str) -> HookRun:
    env = dict(os.environ, ANTIGRAVITY_CONVERSATION_ID=conversation_id)
    data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    try:
        stdout = _run(handler, env, data)
    except subprocess.TimeoutExpired:
        return HookRun(stdout="", error=f"hook timed out after {handler.timeout:g}s")
    except OSError as exc:
        return HookRun(stdout="", error=f"hook failed to start: {exc}")
    text = stdout.decode("utf-8", "replace")
    try:
        users, ephemerals = parse_reply(stdout)
    except BadHookReply as exc:
        return HookRun(stdout=text, error=f"discarding hook reply: {exc}")
    return HookRun(stdout=text, user_messages=users, ephemeral_messages=ephemerals)


def _run(handler: HookHandler, env: dict[str, str], data: bytes) -> bytes:
    return _run_full(handler, env, data)[1]


def _run_full(handler: HookHandler, env: dict[str, str], data: bytes) -> tuple[int, bytes, bytes]:
    proc = subprocess.Popen(
        ["sh", "-c", handler.command],
        cwd=handler.cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        stdout, stderr = proc.communicate(data, timeout=handler.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return proc.returncode, stdout, stderr[-2000:]


def parse_reply(raw: bytes) -> tuple[list[str], list[str]]:
    """``(userMessages, ephemeralMessages)``; raise :class:`BadHookReply` like protojson."""
    if not raw.strip():
        return [], []
    try:
        data = json.loads(raw, object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadHookReply(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadHookReply("not a JSON object")
    unknown = sorted(set(data) - {"injectSteps"})
    if unknown:
        raise BadHookReply(f"unknown field {unknown[0]!r}")
    steps = data.get("injectSteps")
    if steps is None:
        return [], []
    if not isinstance(steps, list):
        raise BadHookReply("injectSteps is not a list")
    users: list[str] = []
    ephemerals: list[str] = []
    for step in steps:
        kind, value = _one_step(step)
        if kind == "userMessage":
            users.append(value)
        elif kind == "ephemeralMessage":
            ephemerals.append(value)
    return users, ephemerals


def _one_step(step: Any) -> tuple[str, str]:
    if not isinstance(step, dict):
        raise BadHookReply("an injected step is not an object")
    unknown = sorted(set(step) - set(_STEP_KINDS))
    if unknown:
        raise BadHookReply(f"unknown field {unknown[0]!r} in an injected step")
    if len(step) != 1:
        raise BadHookReply("an injected step must hold exactly one of " + ", ".join(_STEP_KINDS))
    ((kind, value),) = step.items()
    if kind == "toolCall":
        if not isinstance(value, dict):
            raise BadHookReply("toolCall is not an object")
        return kind, ""  # valid for agy; the simulator does not run injected tool calls
    if not isinstance(value, str):
        raise BadHookReply(f"{kind} is not a string")
    return kind, value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate field {key!r}")
        result[key] = value
    return result
