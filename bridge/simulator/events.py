"""agy's stdout stream, written by hand: one compact JSON object per line, flushed at once.

Shapes follow the recorded streams of real builds (docs/agy.md): ``init`` with the id beside the
``init`` object (or inside it, ``AGY_SIM_INIT_LAYOUT=inside``), ``step_update`` with the
conversation id in every step, ``result`` whose ``error`` is absent on success. Text is
written as UTF-8, not ``\\u`` escapes, so U+2028 reaches the reader raw as it can from agy.
"""

from __future__ import annotations

import json

from bridge.simulator.store import Usage

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from typing import Any, BinaryIO

TOOLS = (
    "call_mcp_tool",
    "command_status",
    "find_by_name",
    "grep_search",
    "invoke_subagent",
    "list_dir",
    "multi_replace_file_content",
    "read_url_content",
    "replace_file_content",
    "run_command",
    "search_web",
    "send_command_input",
    "view_file",
    "write_to_file",
)


def encode(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class Emitter:
    def __init__(self, out: BinaryIO):
        self.out = out
        # [[nulls]]: write absent optional fields as null, as Go's encoder does for a nil
        # slice, map or pointer without omitempty.
        self.nulls = False

    def raw(self, data: bytes) -> None:
        self.out.write(data)
        self.out.flush()

    def emit(self, obj: Any) -> None:
        self.raw(encode(obj))

    def init(
        self,
        conversation_id: str,
        *,
        inside: bool,
        model: str | None,
        cwd: str,
        permission_mode: str,
    ) -> None:
        info: dict[str, Any] = {}
        if inside:
            info["conversation_id"] = conversation_id
        if model is not None:
            info["model"] = model  # only when --model was given, as on real builds
        info.update(cwd=cwd, tools=list(TOOLS), permission_mode=permission_mode)
        if inside:
            self.emit({"event": "init", "init": info})
        else:
            self.emit({"event": "init", "conversation_id": conversation_id, "init": info})

    def step(
        self,
        conversation_id: str,
        index: int,
        state: str,
        step_type: str,
        **fields: Any,
    ) -> None:
        step: dict[str, Any] = {
            "conversation_id": conversation_id,
            "step_index": index,
            "state": state,
            "step_type": step_type,
        }
        step.update(
            {key: value for key, value in fields.items() if value is not None or self.nulls}
        )
        self.emit({"event": "step_update", "step_update": step})

    def result(
        self,
        conversation_id: str,
        *,
        status: str,
        response: str,
        duration_seconds: float,
        num_turns: int,
        usage: Usage,
        error: str | None = None,
        denied_actions: list[dict[str, str]] | None = None,
    ) -> None:
        result: dict[str, Any] = {
            "conversation_id": conversation_id,
            "status": status,
            "response": response,
        }
        if error is not None or self.nulls:
            result["error"] = error
        result.update(
            duration_seconds=round(duration_seconds, 6),
            num_turns=num_turns,
            usage=usage.to_json(),
        )
        if denied_actions or self.nulls:
            result["denied_actions"] = denied_actions or None
        self.emit({"event": "result", "result": result})
