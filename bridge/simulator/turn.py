"""One simulated turn: the steps agy would stream for one user message.

A turn is ``user_input``, then N model calls, each preceded by the ``PreInvocation`` hooks.
Calls before the last one end with a text-less (or narrating) ``agent_response`` and run
tools; the last one streams the answer. The script directives in the user's text decide
what happens (see README.md). SIGINT and the turn's deadline end it at its next wait
(``ctx.waits``); what the turn did so far stays in :class:`TurnState` for the ``result`` that
reports it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from bridge.simulator.atomic import new_uuid4
from bridge.simulator.context import Context, warn
from bridge.simulator.noise import bigline, garbage
from bridge.simulator.record import field, record
from bridge.simulator.script import Action, Script, parse_script, split_context
from bridge.simulator.store import Usage
from bridge.simulator.tool_steps import run_action, since

WAIT_POLL = 0.02
WAIT_LIMIT = 30.0
DEFAULT_CHUNKS = 3


class ScriptedEnd(Exception):
    """``[[error]]`` / ``[[fatal]]``: the turn ends with an ERROR result carrying this text."""

    def __init__(self, text: str, fatal: bool):
        super().__init__(text)
        self.text = text
        self.fatal = fatal


class SimulatedCrash(Exception):
    """``[[crash]]``: agy dies mid-turn without a result."""


@record
class TurnState:
    text: str
    script: Script
    started: float = field(default_factory=time.monotonic)
    injected: list[str] = field(default_factory=list)
    ephemeral: list[str] = field(default_factory=list)  # seen by the latest model call only
    notes: list[str] = field(default_factory=list)  # lines the default reply adds
    denied: list[dict[str, str]] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)  # tool calls the PreToolUse hooks refused
    hook_error: str | None = None  # a PreToolUse handler failed: the result is ERROR
    response: str = ""
    call_started: float = field(default_factory=time.monotonic)

    @classmethod
    def for_text(cls, text: str) -> TurnState:
        return cls(text=text, script=parse_script(text))

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def run_turn(ctx: Context, state: TurnState) -> None:
    """Emit the turn's steps; on return ``state.response`` holds the result's text."""
    script = state.script
    for directive in script.unknown:
        warn(f"warning: simulator ignores unknown or malformed directive {directive}")
    conversation = ctx.conversation
    ctx.emitter.nulls = script.nulls
    conversation.num_turns += 1
    if script.history:
        earlier = sum(m["role"] in ("user", "injected") for m in conversation.messages)
        state.notes.append(f"History: {earlier} earlier user message(s) in this conversation")
    conversation.messages.append({"role": "user", "text": state.text})
    # Stored at once, as agy writes a step when it happens: a process killed mid-turn leaves
    # the request in the conversation, and a resumed process sees it (with no answer).
    index = conversation.take_step()
    ctx.save()
    ctx.step("DONE", "user_input", index=index)
    if ctx.resume_note_pending:
        ctx.resume_note_pending = False
        ctx.step("DONE", "system_message", duration_seconds=0.000135)
    if script.subagent:
        _subagent(ctx, state)
    calls = script.calls
    for call in range(calls):
        _model_call(ctx, state, call, last=call == calls - 1)


def _model_call(ctx: Context, state: TurnState, call: int, *, last: bool) -> None:
    script = state.script
    state.call_started = time.monotonic()
    wait_for = script.wait_first_file if call == 0 else script.wait_file
    if wait_for:
        _wait_for_file(ctx, wait_for)
    _hooks(ctx, state, call)
    if call == 0:
        _first_call_effects(ctx, state)
    if script.sleep:
        ctx.waits.sleep(script.sleep)
    if script.hold_file:
        _wait_for_file(ctx, script.hold_file)
    tools = _tools_for(script, call, last)
    if tools or (call == 0 and script.narrate):
        narration = script.narrate if call == 0 else None
        _planning_response(ctx, state, narration)
        for action in tools:
            outcome = run_action(ctx, action)
            if outcome.note:
                state.notes.append(outcome.note)
            if outcome.denial and outcome.denial not in state.denied:
                state.denied.append(outcome.denial)
            if outcome.refusal:
                state.refusals.append(outcome.refusal)
            if outcome.hook_error and state.hook_error is None:
                state.hook_error = outcome.hook_error
    if call == 0 and script.crash:
        raise SimulatedCrash
    if last:
        _final_response(ctx, state)


def _tools_for(script: Script, call: int, last: bool) -> list[Action]:
    tools = list(script.actions) if call == 0 else []
    if not last:
        tools.append(Action("tool", ("run_command", f"echo step {call + 1}")))
    return tools


def _hooks(ctx: Context, state: TurnState, call: int) -> None:
    conversation = ctx.conversation
    runs = ctx.pre_invocation(ctx.conversation_id, call, conversation.next_step)
    state.ephemeral = []
    for run in runs:
        for message in run.user_messages:
            # A userMessage joins the conversation: a user_input step, stored at once.
            ctx.step("DONE", "user_input")
            conversation.messages.append({"role": "injected", "text": message})
            state.injected.append(message)
            ctx.save()
        state.ephemeral.extend(run.ephemeral_messages)


def _first_call_effects(ctx: Context, state: TurnState) -> None:
    script = state.script
    if script.touch_file:
        _touch(Path(ctx.cwd, script.touch_file))
    if script.hang:
        ctx.waits.sleep(None)  # until SIGINT ends the process, or the deadline the turn
    if script.fatal is not None:
        raise ScriptedEnd(script.fatal, fatal=True)
    if script.error is not None:
        raise ScriptedEnd(script.error, fatal=False)
    if script.garbage:
        garbage(ctx)
    if script.bigline:
        bigline(ctx, script.bigline)
    if script.rules:
        for plugin in ctx.plugins:
            for rule in plugin.rules:
                cut = " (cut)" if rule.truncated else ""
                state.notes.append(
                    f"Rule {plugin.name}/{rule.path.name}: {len(rule.text.encode())} bytes{cut}"
                )
            for server in plugin.mcp_servers:
                state.notes.append(f"MCP server {server.name} ({plugin.name})")


def _subagent(ctx: Context, state: TurnState) -> None:
    """A subagent's model call runs the hooks under ITS conversation id; injections are void."""
    sub_id = new_uuid4()
    info = {
        "subagents": [
            {
                "type_name": "research",
                "role": "Simulated helper",
                "initial_prompt": "Look something up for the parent conversation.",
                "conversation_id": sub_id,
            }
        ]
    }
    index = ctx.step("ACTIVE", "subagent", tool_name="invoke_subagent", subagent_info=info)
    started = time.monotonic()
    if state.script.subagent_wait_file:
        # Held until the test has a message waiting, so the hook call under the subagent's id
        # finds something it must not take.
        _wait_for_file(ctx, state.script.subagent_wait_file)
    runs = ctx.pre_invocation(sub_id, 0, 0)
    for run in runs:
        state.notes.append(f"Subagent hook: {run.stdout.strip()}")
    ctx.step(
        "DONE",
        "subagent",
        index=index,
        tool_name="invoke_subagent",
        duration_seconds=since(started),
        subagent_info=info,
    )


def _planning_response(ctx: Context, state: TurnState, narration: str | None) -> None:
    """An intermediate model call: ONE DONE agent_response, text only when it narrates."""
    text = None
    if narration:
        text = narration if narration.endswith("\n") else narration + "\n"
        state.response += text
    usage = _call_usage(ctx, state, text or "", tool_call=True)
    ctx.step(
        "DONE",
        "agent_response",
        text_delta=text,
        duration_seconds=since(state.call_started),
        usage=usage.to_json(),
    )


def _final_response(ctx: Context, state: TurnState) -> None:
    text = _final_text(ctx, state)
    usage = _call_usage(ctx, state, text, tool_call=False)
    chunks = _split(text, state.script.chunks or DEFAULT_CHUNKS)
    index = ctx.conversation.take_step()
    for chunk in chunks[:-1]:
        ctx.step("ACTIVE", "agent_response", index=index, text_delta=chunk)
    ctx.step(
        "DONE",
        "agent_response",
        index=index,
        text_delta=chunks[-1],
        duration_seconds=since(state.call_started),
        usage=usage.to_json(),
    )
    ctx.conversation.messages.append({"role": "assistant", "text": text})
    state.response += text


def _final_text(ctx: Context, state: TurnState) -> str:
    script = state.script
    if script.reply is not None:
        lines = [script.reply]
    elif script.long_lines is not None:
        lines = [f"line {n}" for n in range(1, script.long_lines + 1)]
    else:
        request, blocks = split_context(state.text)
        context = [f"Context: {blocks} block(s) read, not acted on"] if blocks else []
        lines = [f"You said: {request}", *context, *state.notes]
    lines += state.refusals  # the model was told why its call did not run, and says so
    lines += [f"Injected: {message}" for message in state.injected]
    lines += [f"Ephemeral: {message}" for message in state.ephemeral]
    text = "\n".join(lines)
    return text if text.endswith("\n") else text + "\n"


def _split(text: str, count: int) -> list[str]:
    count = max(1, min(count, len(text)))
    size, extra = divmod(len(text), count)
    chunks, pos = [], 0
    for n in range(count):
        end = pos + size + (1 if n < extra else 0)
        chunks.append(text[pos:end])
        pos = end
    return chunks


def _call_usage(ctx: Context, state: TurnState, output: str, *, tool_call: bool) -> Usage:
    """Deterministic token counts from text lengths; added to the conversation's totals."""
    seen = ctx.conversation.history_chars() + sum(len(m) for m in state.ephemeral)
    thinking = 8
    usage = Usage(
        input_tokens=200 + seen // 4,
        output_tokens=thinking + len(output) // 4 + (16 if tool_call else 1),
        thinking_tokens=thinking,
    )
    ctx.conversation.usage.add(usage)
    return usage


def _wait_for_file(ctx: Context, name: str) -> None:
    path = Path(ctx.cwd, name)
    deadline = time.monotonic() + WAIT_LIMIT
    while not _exists(path):
        if time.monotonic() > deadline:
            warn(f"warning: simulator gave up waiting for {path}")
            return
        ctx.waits.sleep(WAIT_POLL)


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def _exists(path: Path) -> bool:
    return path.exists()


def crash() -> None:
    """What a Go panic leaves behind: a message on stderr, exit code 2, no result."""
    sys.stderr.write("panic: simulated crash\n\ngoroutine 1 [running]:\nmain.main()\n")
    sys.stderr.flush()
