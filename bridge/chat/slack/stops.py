"""Stopping a turn from Slack, three ways, one rule: the bridge's Stop button, Slack's own stop
button on an agent session (``agent_session_stopped``), and a person stopping the answer's
stream (``stopped_by_user`` from ``chat.appendStream``). Each stops the turn as the person who
did it, only when the access lists allow them in that channel (others get the one notice)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bridge.chat.slack.access import AccessPolicy
from bridge.chat.slack.events import PLATFORM
from bridge.chat.slack.users import UserDirectory
from bridge.core.events import Inbound, ThreadRef

log = logging.getLogger(__name__)

# Starts a task in the adapter's task group (nothing while the adapter is not running).
Spawn = Callable[..., None]
# Tells a person privately, once, that the agent is not available to them there.
Refuse = Callable[[str, str, str], None]


class Stops:
    def __init__(
        self,
        access: AccessPolicy,
        users: UserDirectory,
        *,
        spawn: Spawn,
        refuse: Refuse,
        streams_stopped: Callable[[ThreadRef, list[str]], None],
    ) -> None:
        self._access = access
        self._users = users
        self._spawn = spawn
        self._refuse = refuse
        # Tells the thread's running reply which of its streams Slack stopped.
        self._streams_stopped = streams_stopped
        self.inbound: Inbound | None = None

    async def stop_as(self, inbound: Inbound, thread: ThreadRef, user: str) -> None:
        """Stop ``thread``'s turn as ``user``, if allowed."""
        if not self._access.allows(user, thread.channel):
            self._refuse(user, thread.channel, thread.thread)
            return
        try:
            await inbound.stop(thread, await self._users.author(user))
        except Exception:
            # A task of the adapter's group: a failure here must not stop the adapter.
            log.exception("Slack: stopping %s failed", thread.key)

    async def on_button(
        self, inbound: Inbound, body: dict[str, Any], action: dict[str, Any]
    ) -> None:
        """The bridge's Stop button: its value names the thread, which must be the one clicked
        in."""
        user = str((body.get("user") or {}).get("id") or "")
        channel = str(
            (body.get("channel") or {}).get("id")
            or (body.get("container") or {}).get("channel_id")
            or ""
        )
        try:
            thread = ThreadRef.from_key(str(action.get("value") or ""))
        except ValueError:
            return
        if thread.platform != PLATFORM or thread.channel != channel or not user:
            log.warning("Slack: a Stop button for another thread was ignored")
            return
        await self.stop_as(inbound, thread, user)

    async def on_session_stopped(self, inbound: Inbound, event: dict[str, Any]) -> None:
        """Slack's own stop button (``agent_session_stopped``). Slack has stopped the listed
        streams whoever clicked."""
        channel = str(event.get("channel") or "")
        thread_ts = str(event.get("thread_ts") or "")
        user = str(event.get("user") or "")
        if not channel or not thread_ts or not user:
            return
        thread = ThreadRef(platform=PLATFORM, channel=channel, thread=thread_ts)
        stopped = event.get("streaming_message_ts") or []
        self._streams_stopped(thread, [str(ts) for ts in stopped if ts])
        await self.stop_as(inbound, thread, user)

    def stream_stopped(self, thread: ThreadRef, user: str | None) -> None:
        """A person stopped the answer's stream in Slack (``stopped_by_user``): Slack names no
        one, and only the stream's recipient (the turn's author) sees that control, so the turn
        stops as theirs. Run outside the reply's pump: the stop ends the reply, which waits for
        its pump."""
        if self.inbound is None:
            return
        if not user:
            log.warning("Slack: %s was stopped in Slack by someone unknown", thread.key)
            return
        self._spawn(self.stop_as, self.inbound, thread, user)
