"""The scrubber wraps every path that posts text by construction: the wrapper forwards nothing
it does not name (no ``__getattr__``), names every method of the chat contract and of the
posting capabilities, and each method that takes text hands the chat none of a secret.

The walk builds arguments from each method's signature, with the secret in every text, and
records what reaches the adapter behind the wrapper."""

from __future__ import annotations

import inspect
import io
from typing import Any, get_type_hints

import pytest

from bridge.core import capabilities
from bridge.core.events import (
    ApprovalRequest,
    ApprovalResult,
    AttachmentRef,
    Author,
    ChatAdapter,
    Inbound,
    OutgoingFile,
    Reaction,
    ThreadRef,
)
from bridge.core.scrub import Scrubber
from bridge.core.scrubbed_chat import ScrubbedAdapter, ScrubbedOpener, scrubbed
from tests.doubles import RecordingAdapter

pytestmark = pytest.mark.anyio

SECRET = "xoxb-1234567890-secret-token-value"
THREAD = ThreadRef(platform="test", channel="room", thread="t1")
# Methods that post no text of the core's (the turn's stream scrubs itself: open_reply).
POSTS_NOTHING = {"run", "open_reply", "react", "fetch_attachment", "history"}


def protocol_methods(protocol: type) -> set[str]:
    return {
        name
        for name, member in vars(protocol).items()
        if not name.startswith("_") and callable(member)
    }


def argument(name: str, annotation: Any) -> Any:
    """A value for one parameter, with the secret wherever text goes."""
    text = f"the token is {SECRET}"
    values: dict[Any, Any] = {
        ThreadRef: THREAD,
        Author: Author(id="@alice:test", display_name="Alice"),
        Reaction: Reaction.QUEUED,
        OutgoingFile: OutgoingFile(name="notes.txt", data=b"x"),
        ApprovalRequest: ApprovalRequest(
            id="r1", thread=THREAD, tool="run_command", summary=text, preview=text, text=text
        ),
        ApprovalResult: ApprovalResult(state="denied", reason=text, text=text),
        AttachmentRef: AttachmentRef(name="a.txt", source="nowhere"),
    }
    for kind, value in values.items():
        if annotation is kind or (isinstance(annotation, type) and issubclass(annotation, kind)):
            return value
    if name in ("channel", "handle", "message_id", "reply_to"):
        return "id-1"
    if name == "max_bytes":
        return 10
    if name == "key":
        return "cut-off-1-0"  # made by the core from a turn's row: no text of anyone's
    if name == "limit":
        return 5
    if name == "out":
        return io.BytesIO()
    return text  # text, title, and any new str parameter: scrubbed


class Recorder(RecordingAdapter):
    """Every call that reaches the chat, with its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[tuple[str, tuple[Any, ...]]] = []

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if inspect.iscoroutinefunction(value) and not name.startswith("_"):
            received = super().__getattribute__("received")

            async def recorded(*args: Any) -> Any:
                received.append((name, args))
                try:
                    return await value(*args)
                except Exception:
                    return None

            return recorded
        return value


def test_the_wrapper_forwards_nothing_it_does_not_name() -> None:
    for cls in (ScrubbedAdapter, ScrubbedOpener):
        assert "__getattr__" not in vars(cls) and "__getattribute__" not in vars(cls)
    chat = scrubbed({"test": Recorder()}, Scrubber([SECRET]))["test"]
    with pytest.raises(AttributeError):
        chat.replies  # type: ignore[attr-defined]  # noqa: B018


async def test_every_method_that_sends_text_is_scrubbed() -> None:
    inner = Recorder()
    chat = scrubbed({"test": inner}, Scrubber([SECRET]))["test"]
    assert isinstance(chat, ScrubbedOpener), "the recorder opens threads: so does its wrapper"
    contract = (
        protocol_methods(ChatAdapter)
        | protocol_methods(capabilities.OpensThreads)
        | protocol_methods(capabilities.OffersRetry)  # a plain message where it has no button
        | protocol_methods(capabilities.TellsOnce)
    )
    named = {n for n in dir(chat) if not n.startswith("_") and callable(getattr(chat, n))}
    assert contract <= named, f"not wrapped: {contract - named}"
    walked = set()
    for name in sorted(named - POSTS_NOTHING):
        method = getattr(chat, name)
        hints = get_type_hints(method)
        params = [p for p in inspect.signature(method).parameters.values() if p.name != "self"]
        args = [argument(p.name, hints.get(p.name)) for p in params]
        inner.received.clear()
        await method(*args)
        assert inner.received, f"{name} reached nothing"
        assert SECRET not in repr(inner.received), f"{name} posted the secret"
        assert "***" in repr(inner.received), f"{name}: no text was posted?"
        walked.add(name)
    assert walked == contract - POSTS_NOTHING


async def test_a_chat_without_the_capability_gets_no_opener() -> None:
    class Plain:
        platform = "plain"

        async def run(self, inbound: Inbound, started: Any) -> None: ...

    chat = scrubbed({"plain": Plain()}, Scrubber([SECRET]))["plain"]  # type: ignore[dict-item]
    assert not isinstance(chat, capabilities.OpensThreads)
