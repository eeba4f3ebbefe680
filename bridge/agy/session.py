"""One agy session as the core holds it: its directory (the plugin), its listener place, and the
flag that lets the hook command call the bridge.

The hook command runs ``curl`` only while the flag file exists (see
:func:`bridge.agy.plugin.gated_hook_command`), so a model call with nothing to inject costs a
file test instead of an HTTP round trip. The session is the flag's one owner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bridge.agy import wire
from bridge.agy.listener import HookFunc, Registration, UndeliveredFunc
from bridge.agy.plugin import lower_flag, raise_flag

InjectFunc = Callable[[str], Awaitable[list[str]]]
"""``await inject(conversation_id)``: the user messages to hand to that conversation's next
model call (an empty list for none)."""

LostFunc = Callable[[], Awaitable[None]]
"""``await lost()``: the messages of the last injection never reached agy."""


def injection_hook(inject: InjectFunc) -> HookFunc:
    """The listener's hook function for one session: ``PreInvocation`` injects messages."""

    async def hook(event: str, data: wire.HookInput) -> wire.HookReply:
        if event != "PreInvocation":
            return wire.EMPTY_HOOK_REPLY
        texts = await inject(data.conversation_id)
        if not texts:
            return wire.EMPTY_HOOK_REPLY
        return wire.HookReply(inject_steps=[wire.InjectedStep(user_message=t) for t in texts])

    return hook


def undelivered_injection(lost: LostFunc) -> UndeliveredFunc:
    """The listener's report of an answer agy cannot have read, for injections only."""

    async def on_undelivered(event: str, answer: wire.HookAnswer) -> None:
        if event == "PreInvocation" and isinstance(answer, wire.HookReply) and answer.inject_steps:
            await lost()

    return on_undelivered


@dataclass(frozen=True)
class AgySession:
    directory: Path
    registration: Registration

    def mark_pending(self) -> None:
        """A message waits: the next hook call must reach the bridge."""
        raise_flag(self.directory)

    def clear_pending(self) -> None:
        """Nothing waits (a turn or a hook call is taking it all): hook calls stay local.

        Called before the messages are taken, so one stored meanwhile raises the flag again
        and no signal is lost."""
        lower_flag(self.directory)

    async def close(self) -> None:
        await self.registration.close()
