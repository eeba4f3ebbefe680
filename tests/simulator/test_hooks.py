"""Hook replies are read like protojson: one wrong detail discards the whole reply."""

from __future__ import annotations

import pytest

from bridge.simulator.hooks import BadHookReply, parse_reply


@pytest.mark.parametrize(
    ("raw", "users", "ephemerals"),
    [
        (b"{}", [], []),
        (b"", [], []),
        (b"  {}\n", [], []),
        (b'{"injectSteps":[]}', [], []),
        (b'{"injectSteps":null}', [], []),
        (b'{"injectSteps":[{"userMessage":"a"},{"userMessage":"b"}]}', ["a", "b"], []),
        (b'{"injectSteps":[{"ephemeralMessage":"e"}]}', [], ["e"]),
        (b'{"injectSteps":[{"toolCall":{"name":"x"}}]}', [], []),
    ],
)
def test_valid_replies(raw: bytes, users: list[str], ephemerals: list[str]) -> None:
    assert parse_reply(raw) == (users, ephemerals)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'"text"',
        b'{"injectSteps":[{"userMessage":"a"}],"extra":1}',
        b'{"inject_steps":[{"userMessage":"a"}]}',
        b'{"injectSteps":{"userMessage":"a"}}',
        b'{"injectSteps":[{"userMessage":"a","ephemeralMessage":"b"}]}',
        b'{"injectSteps":[{"user_message":"a"}]}',
        b'{"injectSteps":[{"userMessage":1}]}',
        b'{"injectSteps":[{}]}',
        b'{"injectSteps":["a"]}',
        b'{"injectSteps":[],"injectSteps":[]}',
        b"{} {}",
    ],
)
def test_replies_agy_would_discard(raw: bytes) -> None:
    with pytest.raises(BadHookReply):
        parse_reply(raw)
