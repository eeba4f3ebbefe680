"""A thread's agent session (docs.slack.dev "Agent sessions"): ``agents.sessions.setStatus``.

A session is scoped to one thread and has a status: ``processing`` while the agent works
(Slack then shows its own stop button, whose click sends ``agent_session_stopped``), ``active``
when a turn has ended, ``closed`` once the conversation is over (``!new``). Slack never moves
the status by itself: the reply sets ``processing`` with a title (the thread's first line) when
a turn starts and ``active`` when it ends, on the answer's ``chat.stopStream``
(``session_status``) where the answer streams, else with one more ``setStatus``.

Only apps declared as agents can create sessions. Whether this workspace has them is learnt
from Slack's answer to the first call, never guessed: a refusal that concerns the app
(:data:`UNAVAILABLE_ERRORS`, or any other refusal that does not name the thread) marks sessions
unavailable for the run, is logged once, and is written to the data folder for
``agy-bridge doctor``; the replies then keep the status line and the bridge's own Stop message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.lru import LRUMap
from bridge.chat.slack.budget import Deferred
from bridge.chat.slack.client import CALL_ERRORS, api_error, describe, is_transient
from bridge.chat.slack.events import Candidate
from bridge.chat.slack.session_record import record_support
from bridge.core.events import ThreadRef

log = logging.getLogger(__name__)

SessionStatus = Literal["processing", "active", "suspended", "closed"]
# Slack's answers meaning this app has no agent sessions in this workspace (the method is not
# there, a scope or the token type is missing); others that do not name a thread count too.
UNAVAILABLE_ERRORS = frozenset({"unknown_method", "missing_scope", "not_allowed_token_type"})
# Refusals about one thread or channel only: that thread goes without a session.
THREAD_ERRORS = frozenset(
    {"channel_not_found", "invalid_thread_ts", "thread_not_found", "not_in_channel"}
)
# Slack allows at most this many characters in a session's title.
TITLE_LIMIT = 200
# How long a turn waits for the first call's answer before asking again.
_PROBE_WAIT = 0.5


def session_title(text: str) -> str:
    """A session's title: the first non-empty line of the thread, cut to Slack's limit."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if len(line) > TITLE_LIMIT:
        line = line[: TITLE_LIMIT - 1].rstrip() + "…"
    return line or "agy"


@dataclass
class SessionSupport:
    """Whether agent sessions work in this workspace: unknown until Slack first answers."""

    data_dir: Path | None = None
    state: Literal["unknown", "available", "unavailable"] = "unknown"
    reason: str = ""
    # A first call is out and Slack has not answered yet: the others wait for that answer
    # rather than all being refused at once.
    probing: bool = False

    @property
    def wanted(self) -> bool:
        return self.state != "unavailable"

    def available(self) -> None:
        if self.state == "unknown":
            self.state = "available"
            log.info("Slack: agent sessions are available (native status and stop button)")
            self._record()

    def unavailable(self, reason: str) -> None:
        if self.state == "unavailable":
            return
        self.state, self.reason = "unavailable", reason
        log.warning(
            "Slack: agent sessions are unavailable in this workspace (%s): the bridge keeps "
            "its status line and Stop message (declare the app as an agent to change that)",
            reason,
        )
        self._record()

    def _record(self) -> None:
        if self.data_dir is None:
            return
        try:
            record_support(self.data_dir, self.state, self.reason)
        except OSError as exc:
            log.info("could not note the agent sessions' state: %s", exc)


class AgentSession:
    """One thread's session, as one reply (or a ``!new``) moves it."""

    def __init__(
        self,
        client: AsyncWebClient,
        thread: ThreadRef,
        support: SessionSupport,
        *,
        title: str = "",
        initiator: str | None = None,
    ) -> None:
        self._client = client
        self._thread = thread
        self._support = support
        self._title = title
        self._initiator = initiator
        # Whether Slack shows a session for this turn (its stop button while processing).
        self.on = False

    @property
    def wanted(self) -> bool:
        return bool(self._thread.thread) and self._support.wanted

    async def set(self, status: SessionStatus) -> bool:
        """Set the session's status; False when Slack would not (the reason is logged, and a
        refusal that concerns the app marks sessions unavailable)."""
        if not self.wanted:
            return False
        support = self._support
        if support.state == "unknown" and support.probing:
            raise Deferred("agents.sessions.setStatus", _PROBE_WAIT)
        probe = support.state == "unknown"
        support.probing = support.probing or probe
        try:
            response = await self._client.agents_sessions_setStatus(
                channel_id=self._thread.channel,
                thread_ts=self._thread.thread,
                status=status,
                title=self._title or None if status == "processing" else None,
                initiator_user_id=self._initiator if status == "processing" else None,
            )
        except CALL_ERRORS as exc:
            code = api_error(exc)
            if is_transient(exc) or code in THREAD_ERRORS or not code:
                log.info("no agent session %s in %s: %s", status, self._thread.key, describe(exc))
            else:
                self._support.unavailable(code)
            return False
        finally:
            if probe:
                support.probing = False
        warning = response.get("warning") if response is not None else None
        if warning:
            log.info("Slack warns about the agent session of %s: %s", self._thread.key, warning)
        self._support.available()
        self.on = status == "processing"
        return True

    def ended_by_stream(self) -> None:
        """The answer's ``chat.stopStream`` carried ``session_status``: nothing left to do."""
        self.on = False


class Sessions:
    """The adapter's side of agent sessions: whether Slack has them (:class:`SessionSupport`),
    each thread's title (its first line, as the bridge saw it), a session for each reply, and
    ``!new`` closing one."""

    def __init__(
        self, client: AsyncWebClient, data_dir: Path | None, *, spawn: Callable[..., None]
    ) -> None:
        self._client = client
        self.support = SessionSupport(data_dir=data_dir)
        self._titles: LRUMap[tuple[str, str], str] = LRUMap(4096)
        # Threads a person named in Slack: the bridge gives their sessions no title of its own.
        self._named: LRUMap[tuple[str, str], None] = LRUMap(4096)
        self._spawn = spawn

    def named_by_person(self, thread: ThreadRef) -> None:
        self._named.put((thread.channel, thread.thread), None)

    def note_title(self, candidate: Candidate) -> None:
        """The thread's first line, for its session's title (Slack keeps the first one)."""
        key = (candidate.thread.channel, candidate.thread.thread)
        if candidate.ts == candidate.thread.thread or self._titles.get(key) is None:
            self._titles.put(key, session_title(candidate.text))

    def session(self, thread: ThreadRef, initiator: str | None) -> AgentSession | None:
        if not thread.thread:
            return None
        key = (thread.channel, thread.thread)
        title = "" if key in self._named else self._titles.get(key) or ""
        return AgentSession(self._client, thread, self.support, title=title, initiator=initiator)

    def conversation_reset(self, thread: ThreadRef) -> None:
        """``!new`` ended the thread's conversation (the core says so): its session closes."""
        session = self.session(thread, None)
        if session is not None and session.wanted:
            self._spawn(self._close, session)

    @staticmethod
    async def _close(session: AgentSession) -> None:
        try:
            await session.set("closed")
        except Deferred:
            pass  # Slack has not said yet whether there are sessions: nothing to close then
