"""Running hook handlers and reading their replies the way agy does.

A handler runs under ``sh -c`` in the folder of its ``hooks.json``, with the simulator's
environment plus ``ANTIGRAVITY_CONVERSATION_ID``, the camelCase hook input on stdin, and is
killed after its timeout. Its exit code is ignored. Its stdout is parsed like protojson:
a JSON object whose only key is ``injectSteps``, a list of objects holding exactly one of
``userMessage``, ``ephemeralMessage`` (strings) or ``toolCall``. Anything else, duplicate
keys included, discards the whole reply.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any

from bridge.simulator.plugins import HookHandler
from bridge.simulator.threads import in_thread

_STEP_KINDS = ("userMessage", "ephemeralMessage", "toolCall")


class BadHookReply(ValueError):
    """Why agy would discard a hook's whole reply."""


@dataclass
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


async def run_handler(
    handler: HookHandler, payload: dict[str, Any], conversation_id: str
) -> HookRun:
    env = dict(os.environ, ANTIGRAVITY_CONVERSATION_ID=conversation_id)
    data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    try:
        stdout = await in_thread(_run, handler, env, data)
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
    proc = subprocess.Popen(
        ["sh", "-c", handler.command],
        cwd=handler.cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        stdout, _ = proc.communicate(data, timeout=handler.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return stdout


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
