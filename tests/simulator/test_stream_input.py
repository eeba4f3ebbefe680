from __future__ import annotations

import json

import pytest

from bridge.simulator.stream_input import Ignored, InputError, UserTurn, parse_line


def line(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def test_text_blocks_and_plain_string_content() -> None:
    blocks = {"event": "user", "message": {"role": "user", "content": [
        {"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}}  # fmt: skip
    assert parse_line(line(blocks)) == UserTurn("one\ntwo")
    assert parse_line(line({"event": "user", "message": {"content": "plain"}})) == UserTurn("plain")


def test_u2028_inside_a_line_is_text() -> None:
    raw = '{"event":"user","message":{"content":"a\u2028b"}}\n'.encode()
    assert parse_line(raw) == UserTurn("a\u2028b")


def test_blank_lines_are_skipped() -> None:
    assert parse_line(b"\n") is None


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"reply with alpha\n", "failed to decode stream input: invalid character 'r'"),
        (b'{"prompt": "x"}\n', 'stream input message is missing the "event" field'),
        (
            line({"event": "user", "message": {"content": [{"type": "image", "data": "x"}]}}),
            'stream input content block type "image" is not supported (only "text")',
        ),
        (b"[1]\n", "failed to decode stream input"),
    ],
)
def test_fatal_lines(raw: bytes, error: str) -> None:
    parsed = parse_line(raw)
    assert isinstance(parsed, InputError)
    assert parsed.message.startswith(error)


def test_other_events_are_ignored_with_a_warning() -> None:
    parsed = parse_line(line({"event": "control_request"}))
    assert parsed == Ignored('warning: ignoring stream input event "control_request"')
