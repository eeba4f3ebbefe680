"""Every shape agy reads or writes, in one module.

The evidence is summarised in docs/agy.md. When a new agy build changes a shape, the fix
belongs here and nowhere else. Models that read agy's output keep
unknown fields (``extra="allow"``) and accept unknown event and step types; models that we write
for agy are strict, because agy parses its inputs strictly (protojson for hook replies, one parse
error drops a whole ``hooks.json``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

# --- stdout: the event stream -------------------------------------------------------------


class _Tolerant(BaseModel):
    """A shape agy writes: unknown fields kept, and ``null`` read as "absent" in every field.

    Go's encoder writes ``null`` for a nil slice, map or pointer, and one null in an optional
    field must not turn a whole line (a lost ``result`` stalls a turn) into a bad line. On
    stdout, :func:`parse_event` takes the nulls out before validation, and only from a line
    that has one: a validator on every model would call back into Python once per model, on
    every streamed delta, although agy's lines rarely carry a null.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class _NullTolerant(_Tolerant):
    """A shape validated straight from JSON (a hook's input), where no pass can come before
    the validation: each model drops its own nulls."""

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data: Any) -> Any:
        # Most inputs have no null at all: look (in C) before building a new dict.
        if isinstance(data, dict) and None in data.values():
            return {key: value for key, value in data.items() if value is not None}
        return data


def _nulls_removed(value: Any) -> Any:
    """``value`` without a null anywhere: in no object's fields, in no list."""
    if isinstance(value, dict):
        return {key: _nulls_removed(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_nulls_removed(item) for item in value if item is not None]
    return value


def _without_nulls(value: Any) -> Any:
    return [item for item in value if item is not None] if isinstance(value, list) else value


# A list agy writes, where a null element is skipped rather than failing the line.
_StrList = Annotated[list[str], BeforeValidator(_without_nulls)]


class Usage(_Tolerant):
    input_tokens: int = 0
    output_tokens: int = 0
    thinking_tokens: int = 0
    cache_read_tokens: int = 0
    # Input plus output; thinking is counted inside output.
    total_tokens: int = 0


class InitInfo(_Tolerant):
    conversation_id: str | None = None
    model: str | None = None  # present only when --model was given
    cwd: str | None = None
    tools: _StrList = Field(default_factory=list)
    permission_mode: str | None = None


class InitEvent(_Tolerant):
    event: Literal["init"] = "init"
    # Recorded builds put the id beside the init object; the seed puts it inside. Accept both.
    conversation_id: str | None = None
    init: InitInfo = Field(default_factory=InitInfo)

    @property
    def conversation(self) -> str | None:
        return self.conversation_id or self.init.conversation_id or None


class ToolError(_Tolerant):
    type: str | None = None
    message: str = ""


class ToolInfo(_Tolerant):
    name: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    output: str | None = None
    error: ToolError | None = None


PERMISSION_DENIED_MARK = "permission check failed"


class StepUpdate(_Tolerant):
    conversation_id: str | None = None
    step_index: int = -1
    # ACTIVE while running, then DONE; ERROR for a failed or refused tool.
    state: str = ""
    # user_input, agent_response, tool, system_message, subagent, checkpoint, error_message,
    # unknown, ... and whatever a later build adds.
    step_type: str = ""
    text_delta: str | None = None
    tool_name: str | None = None
    tool_info: ToolInfo | None = None
    duration_seconds: float | None = None
    usage: Usage | None = None

    @property
    def is_permission_denial(self) -> bool:
        return bool(
            self.state == "ERROR"
            and self.tool_info is not None
            and self.tool_info.error is not None
            and PERMISSION_DENIED_MARK in self.tool_info.error.message
        )


class StepUpdateEvent(_Tolerant):
    event: Literal["step_update"] = "step_update"
    step_update: StepUpdate


class DeniedAction(_Tolerant):
    action: str = ""
    display_name: str = ""


class ResultInfo(_Tolerant):
    conversation_id: str | None = None
    status: str = ""
    response: str = ""
    # Absent on success; agy's own words otherwise ("interrupted", quota, login, ...).
    error: str | None = None
    duration_seconds: float | None = None
    # usage, num_turns and duration accumulate over the whole conversation.
    num_turns: int | None = None
    usage: Usage | None = None
    denied_actions: Annotated[list[DeniedAction], BeforeValidator(_without_nulls)] = Field(
        default_factory=list
    )

    @property
    def ok(self) -> bool:
        return self.status == "SUCCESS"


class ResultEvent(_Tolerant):
    event: Literal["result"] = "result"
    result: ResultInfo


class UnknownEvent(_Tolerant):
    """A JSON object with an ``event`` we do not know: kept, never fatal."""

    event: str = ""


AgyEvent = InitEvent | StepUpdateEvent | ResultEvent | UnknownEvent

_EVENT_MODELS: dict[str, type[BaseModel]] = {
    "init": InitEvent,
    "step_update": StepUpdateEvent,
    "result": ResultEvent,
}
# Their validators, called directly: ``model_validate`` adds a Python call around each, on the
# path of every streamed delta.
_VALIDATORS = MappingProxyType(
    {kind: model.__pydantic_validator__ for kind, model in _EVENT_MODELS.items()}
)
_UNKNOWN_VALIDATOR = UnknownEvent.__pydantic_validator__
# The three known events in one validator that reads the JSON itself (in Rust, told apart by
# ``event``): a line with no null needs no Python dict at all on its way to its model.
_KNOWN_EVENTS = TypeAdapter(
    Annotated[InitEvent | StepUpdateEvent | ResultEvent, Field(discriminator="event")]
).validator


class BadLine(Exception):
    """A stdout line that is not an agy event; carries the reason and a short excerpt."""

    def __init__(self, reason: str, line: bytes | str):
        excerpt = line if isinstance(line, str) else line[:200].decode("utf-8", "replace")
        super().__init__(f"{reason}: {excerpt[:200]!r}")
        self.reason = reason


def parse_event(line: bytes | str) -> AgyEvent:
    """Parse one stdout line; raise :class:`BadLine` when it is not an event object."""
    if b"null" not in line if isinstance(line, bytes) else "null" not in line:
        try:
            known: AgyEvent = _KNOWN_EVENTS.validate_json(line)
            return known
        except ValidationError:
            # An unknown event, a malformed line, or JSON only the standard parser takes (a
            # lone surrogate): the careful way below decides, and says why.
            pass
    try:
        # orjson: several times faster than json on the path of every streamed delta.
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        # orjson refuses lone surrogates (\\ud800), which agy's JSON can carry and the
        # scrubber makes printable later: the standard parser decides.
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            raise BadLine("not JSON", line) from None
    if not isinstance(obj, dict):
        raise BadLine("not a JSON object", line)
    # A null is the literal ``null`` in the line (or, rarely, those letters in a string: then
    # the pass below finds nothing to take out).
    if b"null" in line if isinstance(line, bytes) else "null" in line:
        try:
            obj = _nulls_removed(obj)
        except RecursionError:
            raise BadLine("nested too deeply", line) from None
    kind = obj.get("event")
    if not isinstance(kind, str):
        raise BadLine("no event field", line)
    validator = _VALIDATORS.get(kind)
    if validator is None:
        event: AgyEvent = _UNKNOWN_VALIDATOR.validate_python(obj)
        return event
    try:
        event = validator.validate_python(obj)
    except ValidationError as exc:
        raise BadLine(f"malformed {kind} event ({exc.error_count()} problems)", line) from None
    return event


# --- stdin: user turns --------------------------------------------------------------------


def user_line(blocks: list[str]) -> bytes:
    """One stdin line for a turn. Only text blocks: agy ends the process on any other type."""
    content = [{"type": "text", "text": text} for text in blocks]
    message = {"event": "user", "message": {"role": "user", "content": content}}
    # ensure_ascii keeps U+2028 and friends escaped, so no reader can mistake them for a break.
    return (json.dumps(message, ensure_ascii=True) + "\n").encode("ascii")


# --- hooks: what agy posts and what it accepts back ----------------------------------------


class HookInput(_NullTolerant):
    """The camelCase JSON agy writes to a hook's stdin. The prompt text is not in it."""

    conversation_id: str = Field(default="", alias="conversationId")
    workspace_paths: _StrList = Field(default_factory=list, alias="workspacePaths")
    transcript_path: str | None = Field(default=None, alias="transcriptPath")
    artifact_directory_path: str | None = Field(default=None, alias="artifactDirectoryPath")
    model_name: str | None = Field(default=None, alias="modelName")
    # PreInvocation only: 0 again at every new user prompt.
    invocation_num: int | None = Field(default=None, alias="invocationNum")
    initial_num_steps: int | None = Field(default=None, alias="initialNumSteps")


class ToolCall(_NullTolerant):
    """The tool call a ``PreToolUse`` hook is asked about."""

    name: str = ""  # as agy names it: run_command, write_to_file, replace_file_content, ...
    # Keyed as tool_info.parameters in the stream: CommandLine, TargetFile, AbsolutePath, ...
    args: dict[str, Any] = Field(default_factory=dict)


class PreToolUseInput(HookInput):
    """``PreToolUse`` input: the common fields plus the tool call and its step's index."""

    tool_call: ToolCall = Field(default_factory=ToolCall, alias="toolCall")
    step_idx: int | None = Field(default=None, alias="stepIdx")


def parse_hook_input(event: str, body: bytes | str) -> HookInput:
    """One hook call's input, in the model of its event. Raises pydantic's ValidationError."""
    model = PreToolUseInput if event == PRE_TOOL_USE else HookInput
    return model.model_validate_json(body)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class InjectedStep(_Strict):
    # A userMessage joins the conversation (sent on every later call); an ephemeralMessage
    # reaches only the next model call. Chat messages are userMessages.
    user_message: str | None = Field(default=None, alias="userMessage")
    ephemeral_message: str | None = Field(default=None, alias="ephemeralMessage")


class HookReply(_Strict):
    inject_steps: list[InjectedStep] | None = Field(default=None, alias="injectSteps")

    def to_json(self) -> bytes:
        """Exactly ``{}`` or ``{"injectSteps":[...]}``: agy drops a reply with any other key."""
        if not self.inject_steps:
            return b"{}"
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


EMPTY_HOOK_REPLY = HookReply()

# Events that take a flat list of handlers; tool events take matcher groups.
HOOK_EVENTS = ("SessionStart", "PreInvocation", "PostInvocation", "Stop")
PRE_TOOL_USE = "PreToolUse"
TOOL_HOOK_EVENTS = (PRE_TOOL_USE, "PostToolUse")


class ToolDecision(_Strict):
    """A ``PreToolUse`` reply. agy reads it strictly and fails closed: an unknown key, no
    decision or no JSON at all means the tool does not run. ``ask``/``force_ask`` ask agy's
    own prompt, which print mode cannot show, so the bridge answers ``allow`` or ``deny``."""

    decision: Literal["allow", "deny", "ask", "force_ask"]
    reason: str | None = None  # the model reads "Tool call denied by pre-tool hook: <reason>"

    def to_json(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode()


HookAnswer = HookReply | ToolDecision
"""What a hook function answers: injections for the flat events, a decision for PreToolUse."""


def fallback_answer(event: str, reason: str) -> HookAnswer:
    """The answer when the bridge has none (the hook failed, timed out, or the session
    closed): nothing to inject, or for a tool call an explicit ``deny`` saying why."""
    if event == PRE_TOOL_USE:
        return ToolDecision(decision="deny", reason=reason)
    return EMPTY_HOOK_REPLY


def is_empty_answer(answer: HookAnswer) -> bool:
    """Whether losing this answer loses nothing (``{}``)."""
    return isinstance(answer, HookReply) and not answer.inject_steps


# --- the session directory as a plugin -----------------------------------------------------

RULE_FILE_LIMIT = 24_000  # agy cuts each rule file here; we refuse rather than lose the tail.
PLUGINS_DIR = (".agents", "plugins")


class HookHandler(_Strict):
    type: Literal["command"] = "command"
    command: str
    timeout: int = Field(default=10, ge=1)  # seconds


class MatcherGroup(_Strict):
    """Handlers of a tool event for the tools ``matcher`` names: a tool's name as agy calls it
    (``run_command``, ``write_to_file``, ...) or ``"*"`` for every tool."""

    matcher: str = Field(min_length=1)
    hooks: list[HookHandler] = Field(min_length=1)


def hooks_file(
    bundle: str,
    handlers: Mapping[str, HookHandler],
    tool_handlers: Mapping[str, Sequence[MatcherGroup]] | None = None,
) -> dict[str, Any]:
    """``hooks.json``: a map of NAMED bundles. A flat ``{"PreInvocation": [...]}`` is inert.

    ``handlers``: one handler per flat event. ``tool_handlers``: matcher groups per tool event
    (``PreToolUse``), written only when given.
    """
    if bundle in HOOK_EVENTS or bundle in TOOL_HOOK_EVENTS or bundle == "enabled":
        raise ValueError(f"hook bundle name {bundle!r} would be read as an event or a switch")
    events: dict[str, Any] = {}
    for event, handler in handlers.items():
        if event not in HOOK_EVENTS:
            raise ValueError(f"{event!r} is not an event that takes a flat list of handlers")
        events[event] = [handler.model_dump(exclude_none=True)]
    for event, groups in (tool_handlers or {}).items():
        if event not in TOOL_HOOK_EVENTS:
            raise ValueError(f"{event!r} is not a tool event (they take matcher groups)")
        if groups:
            events[event] = [group.model_dump(exclude_none=True) for group in groups]
    return {bundle: events}


def mcp_config_file(servers: dict[str, str]) -> dict[str, Any]:
    """``mcp_config.json``; agy requires ``serverUrl`` (``url`` only on later builds)."""
    return {"mcpServers": {name: {"serverUrl": url} for name, url in servers.items()}}


def plugin_file(name: str) -> dict[str, Any]:
    return {"name": name}


def always_on_rule(text: str) -> str:
    """A rule file that agy applies to every turn."""
    return f"---\ntrigger: always_on\n---\n\n{text}"


def mcp_tool_name(plugin: str, server: str) -> str:
    """agy renames plugin servers ``<plugin>_<server>``."""
    return f"{plugin}_{server}"
