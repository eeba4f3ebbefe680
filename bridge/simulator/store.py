"""Conversations on disk, so ``--conversation ID`` resumes like agy's.

One JSON file per conversation under ``$AGY_SIM_HOME/conversations/``, replaced atomically
(write a temporary file, then rename) when a turn starts and ends and after every injected
message, so a process killed at any moment leaves either the old state or the new one.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from bridge.simulator.atomic import replace_file
from bridge.simulator.record import field, record

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from typing import Any

_USAGE_KEYS = ("input_tokens", "output_tokens", "thinking_tokens", "cache_read_tokens")
# Ids we mint are uuid4; anything else given to --conversation must still be a safe file name.
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@record
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0  # thinking is counted inside output, as agy does
    thinking_tokens: int = 0
    cache_read_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.thinking_tokens += other.thinking_tokens
        self.cache_read_tokens += other.cache_read_tokens

    def to_json(self) -> dict[str, int]:
        data = {key: int(getattr(self, key)) for key in _USAGE_KEYS}
        data["total_tokens"] = self.total_tokens
        return data

    @classmethod
    def from_json(cls, data: Any) -> Usage:
        if not isinstance(data, dict):
            return cls()
        return cls(**{key: int(data.get(key, 0)) for key in _USAGE_KEYS})


@record
class Conversation:
    conversation_id: str
    cwd: str
    next_step: int = 0
    num_turns: int = 0
    duration_seconds: float = 0.0
    usage: Usage = field(default_factory=Usage)
    # {"role": "user" | "injected" | "assistant", "text": ...}: what later model calls "see".
    messages: list[dict[str, str]] = field(default_factory=list)
    updated_at: float = 0.0

    def take_step(self) -> int:
        index = self.next_step
        self.next_step += 1
        return index

    def history_chars(self) -> int:
        return sum(len(message["text"]) for message in self.messages)

    def to_json(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "cwd": self.cwd,
            "next_step": self.next_step,
            "num_turns": self.num_turns,
            "duration_seconds": self.duration_seconds,
            "usage": self.usage.to_json(),
            "messages": self.messages,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Conversation:
        return cls(
            conversation_id=str(data["conversation_id"]),
            cwd=str(data.get("cwd", "")),
            next_step=int(data.get("next_step", 0)),
            num_turns=int(data.get("num_turns", 0)),
            duration_seconds=float(data.get("duration_seconds", 0.0)),
            usage=Usage.from_json(data.get("usage")),
            messages=[
                {"role": str(m.get("role", "")), "text": str(m.get("text", ""))}
                for m in data.get("messages", [])
                if isinstance(m, dict)
            ],
            updated_at=float(data.get("updated_at", 0.0)),
        )


class ConversationStore:
    def __init__(self, home: Path):
        self.root = home / "conversations"

    def path(self, conversation_id: str) -> Path:
        return self.root / f"{conversation_id}.json"

    def load(self, conversation_id: str) -> Conversation | None:
        if not _SAFE_ID.match(conversation_id):
            return None
        try:
            data = json.loads(self.path(conversation_id).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("conversation_id") != conversation_id:
            return None
        return Conversation.from_json(data)

    def latest_for(self, cwd: str) -> Conversation | None:
        """The most recently updated conversation started in ``cwd`` (``--continue``)."""
        best: Conversation | None = None
        for path in self.root.glob("*.json") if self.root.is_dir() else ():
            conversation = self.load(path.stem)
            if conversation is None or conversation.cwd != cwd:
                continue
            if best is None or conversation.updated_at > best.updated_at:
                best = conversation
        return best

    def save(self, conversation: Conversation) -> None:
        conversation.updated_at = time.time()
        self.root.mkdir(parents=True, exist_ok=True)
        payload = json.dumps(conversation.to_json(), ensure_ascii=False).encode("utf-8")
        # No fsync: the rename alone leaves a killed process's file old or new, which is what
        # the fault tests kill; fsync guards only against the machine going down, and costs a
        # turn (two or more writes) about 14 ms of waiting on this project's CI disks.
        replace_file(self.path(conversation.conversation_id), payload, prefix=".tmp-", sync=False)
