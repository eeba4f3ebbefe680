"""stdin in stream-json mode: lines split on ``\\n`` only, each checked as agy checks it.

``{"event":"user","message":{"role":"user","content":[{"type":"text","text":"…"}]}}``;
``content`` may also be a plain string. A line that is not JSON, has no ``event``, or holds a
non-text block is fatal for the process (agy answers an ERROR ``result`` and exits 1); an
``event`` other than ``user`` is ignored with a warning.
"""

from __future__ import annotations

import json
import queue
import threading

from bridge.simulator.record import record

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from typing import Any, BinaryIO


@record(frozen=True)
class UserTurn:
    text: str


@record(frozen=True)
class InputError:
    message: str  # agy's wording, used as the result's ``error``


@record(frozen=True)
class Ignored:
    warning: str


ParsedLine = UserTurn | InputError | Ignored


def parse_line(line: bytes) -> ParsedLine | None:
    """One stdin line; ``None`` for a blank one (a JSON stream decoder skips whitespace)."""
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        return InputError(f"failed to decode stream input: {_decode_reason(line, exc)}")
    if not isinstance(obj, dict):
        return InputError(
            "failed to decode stream input: json: cannot unmarshal "
            f"{_json_kind(obj)} into Go value of type stream input message"
        )
    event = obj.get("event")
    if not isinstance(event, str) or not event:
        return InputError('stream input message is missing the "event" field')
    if event != "user":
        return Ignored(f'warning: ignoring stream input event "{event}"')
    message = obj.get("message")
    if not isinstance(message, dict):
        return InputError('stream input message is missing the "message" field')
    return _content_text(message.get("content"))


def _content_text(content: Any) -> UserTurn | InputError:
    if isinstance(content, str):
        return UserTurn(content)
    if content is None:
        return UserTurn("")
    if not isinstance(content, list):
        return InputError(
            "failed to decode stream input: json: cannot unmarshal "
            f"{_json_kind(content)} into message content"
        )
    texts = []
    for block in content:
        if not isinstance(block, dict):
            return InputError("failed to decode stream input: content block is not an object")
        kind = block.get("type")
        if kind != "text":
            return InputError(
                f'stream input content block type "{kind if isinstance(kind, str) else ""}" '
                'is not supported (only "text")'
            )
        text = block.get("text", "")
        if not isinstance(text, str):
            return InputError("failed to decode stream input: text block text is not a string")
        texts.append(text)
    return UserTurn("\n".join(texts))


def _decode_reason(line: bytes, exc: Exception) -> str:
    """Go's encoding/json wording for the common case, Python's otherwise."""
    stripped = line.lstrip()
    first = stripped[:1].decode("latin-1")
    if first and first not in '{["-0123456789tfn':
        return f"invalid character {first!r} looking for beginning of value"
    return str(exc)


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else "object"


class LineReader:
    """Reads stdin on a daemon thread and hands lines to the main thread (``None`` = EOF).

    A thread rather than a pipe transport: stdin may be a pipe, a file or a terminal, and
    the reader must keep going while a turn runs so that EOF and later lines are seen.
    """

    def __init__(self, stream: BinaryIO):
        self.queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._stream = stream

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True, name="sim-stdin").start()

    def _read(self) -> None:
        try:
            while True:
                line = self._stream.readline()  # binary readline splits on b"\n" only
                if not line:
                    break
                self.queue.put(line)
        except (OSError, ValueError):
            pass
        self.queue.put(None)
