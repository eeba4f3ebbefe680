"""The team controls a thread's turns go through: budgets before, usage and audit after.

:meth:`TeamControls.prepare` is the budget check on every turn's path: before the turn policy
is asked about a turn or about messages joining someone else's running turn, it reads from the
store where each author's budgets stand and hands that reading to the policy
(:mod:`bridge.core.team.policy`), which refuses what is over a limit. With no ``[[budgets]]``
it costs nothing. The rest records what the turn did: usage when it ends, and the audit trail.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bridge.agy.turn import ToolUpdate
from bridge.config import Config
from bridge.core.events import Author, ThreadRef
from bridge.core.store.rows import Database, StoredMessage, StoreError
from bridge.core.team.audit import AuditLog, Entry
from bridge.core.team.budgets import Budgets, Standing
from bridge.core.team.metrics import UsageMetrics
from bridge.core.team.policy import BudgetPolicy, Reading
from bridge.core.team.texts import warning_text
from bridge.core.team.usage import TurnUsage, UsageBook
from bridge.core.thread.turn_policy import Ask, Go, Refuse, Verdict
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

Say = Callable[[ThreadRef, str], Awaitable[object]]


class TeamControls:
    def __init__(self, db: Database, config: Config, audit: AuditLog, metrics: Metrics):
        self._db = db
        self.config = config
        self.audit = audit
        self.book = UsageBook(db, config.pricing, config.agy.model)
        self.budgets = Budgets(
            db, self.book, config.budgets, config.pricing, config.bridge.timezone
        )
        self.metrics = UsageMetrics(metrics)
        self.policy = BudgetPolicy(config.pricing.currency)

    @property
    def currency(self) -> str:
        return self.config.pricing.currency

    # --- before a turn, before an injection -----------------------------------------------

    async def prepare(self, ask: Ask, say: Say) -> Reading | None:
        """Read where the budgets of ``ask``'s authors stand, for the turn policy to judge;
        tell the thread once per period about a budget past its warning level.

        A store that cannot be read lets the turn go (logged): the turn has taken its messages
        already, and a budget is not worth losing them over."""
        if not self.budgets.enabled:
            return None
        now = time.time()
        standings: dict[str, tuple[Standing, ...]] = {}
        try:
            for author in ask.who:
                if author.id not in standings:
                    standings[author.id] = tuple(await self.budgets.check(author, ask.where, now))
        except StoreError as exc:
            log.error("could not read the budgets: %s", exc, extra={"chat_thread": ask.where.key})
            return None
        reading = Reading(ask, standings)
        self.policy.expect(reading)
        for author in dict.fromkeys(ask.who):
            if not any(s.over for s in standings[author.id]):  # else refused, and told so
                await self._warn(ask.where, author, standings[author.id], say)
        return reading

    async def _warn(
        self, ref: ThreadRef, author: Author, standings: tuple[Standing, ...], say: Say
    ) -> None:
        """The warning, once per budget, subject, period and thread."""
        for s in standings:
            try:
                if s.warned and await self.budgets.first_notice(s, ref.key):
                    await say(ref, warning_text(_name(author), s, self.currency))
            except Exception:
                log.exception("could not tell a budget's warning", extra={"chat_thread": ref.key})

    async def judged(
        self,
        ref: ThreadRef,
        reading: Reading | None,
        verdict: Verdict,
        messages: list[StoredMessage],
        turn_id: int,
        conversation: str | None = None,
    ) -> None:
        """The turn policy answered (``conversation``: for a turn; None: an injection): a turn
        that starts, a refusal over a budget, or another policy's refusal or hold, for the
        trail."""
        if isinstance(verdict, Go):
            if conversation is not None:
                await self.turn_started(ref, turn_id, conversation, messages)
            return
        over = reading.over() if reading is not None else []
        if isinstance(verdict, Refuse) and reading is not None and over:
            for message in messages:
                standing = next(
                    (s for s in reading.standings.get(message.author.id, ()) if s.over),
                    over[0][1],  # else refused with the turn it was in
                )
                await self._refused(reading.ask, message, standing, turn_id)
            return
        for message in messages:
            await self.audit.append(
                "turn_refused" if isinstance(verdict, Refuse) else "turn_held",
                thread=ref,
                person=message.author,
                turn=turn_id,
                message=message.message_id,
                text=message.text,
                reason=verdict.reason,
                into_running_turn=conversation is None,
            )

    async def _refused(self, ask: Ask, message: StoredMessage, s: Standing, turn_id: int) -> None:
        self.metrics.refused(s.budget.label)
        await self.audit.append(
            "budget_refused",
            thread=ask.where,
            person=message.author,
            turn=turn_id,
            message=message.message_id,
            text=message.text,
            budget=s.budget.label,
            subject=s.subject,
            period=s.period.key,
            used_tokens=s.used.tokens.total,
            used_cost=s.used.cost,
            limit_tokens=s.limit_tokens,
            limit_cost=s.limit_cost,
            into_running_turn=ask.kind == "inject",
        )

    async def command(self, thread: ThreadRef, by: Author, name: str, arg: str = "") -> None:
        """A chat command typed (or a Stop clicked), for the trail."""
        if name != "unknown":
            await self.audit.append("command", thread=thread, person=by, command=name, arg=arg)

    # --- what a turn did, for the trail ------------------------------------------------------

    async def turn_started(
        self, ref: ThreadRef, turn_id: int, conversation: str, messages: list[StoredMessage]
    ) -> None:
        """Who asked, with their messages: each ``queued`` (written while the thread's turn
        before ran, and not injected into it) or ``new`` (written since)."""
        try:
            rows = await self._db.fetch(
                "SELECT MAX(ended_at) AS ended FROM turns WHERE thread_key = ? AND id < ?",
                (ref.key, turn_id),
            )
            before = rows[0]["ended"] if rows else None
        except StoreError:
            before = None
        await self.audit.append(
            "turn_started",
            thread=ref,
            person=messages[-1].author if messages else None,
            turn=turn_id,
            conversation=conversation,
            messages=[
                _message(m, "queued" if before is not None and m.received_at < before else "new")
                for m in messages
            ],
        )

    async def injected(self, ref: ThreadRef, turn_id: int, messages: list[StoredMessage]) -> None:
        """Messages a hook call handed to the running turn: one commit for them all (the hook's
        answer waits for it)."""
        await self.audit.append_all(
            [
                Entry(
                    "message_injected",
                    ref,
                    m.author,
                    {"turn": turn_id, "message": m.message_id, "text": m.text},
                )
                for m in messages
            ]
        )

    async def tool_call(self, ref: ThreadRef, turn_id: int, tool: ToolUpdate) -> None:
        outcome = "denied" if tool.denied else ("error" if tool.state == "ERROR" else "done")
        await self.audit.append(
            "tool_call",
            thread=ref,
            turn=turn_id,
            tool=tool.name,
            target=tool.summary,
            outcome=outcome,
            error=tool.error,
        )

    async def turn_ended(
        self, ref: ThreadRef, turn_id: int, state: str, error: str | None
    ) -> TurnUsage | None:
        usage = await self.turn_recorded(turn_id, ref)
        detail: dict[str, Any] = {"turn": turn_id, "state": str(state), "error": error}
        if usage is not None:
            t = usage.tokens
            detail.update(
                model=usage.model,
                tokens={
                    "input": t.input,
                    "output": t.output,
                    "thinking": t.thinking,
                    "cache_read": t.cache_read,
                    "total": t.total,
                },
                cost=usage.cost,
                attributed={share.person: share.tokens.total for share in usage.shares},
            )
        await self.audit.append("turn_ended", thread=ref, **detail)
        return usage

    # --- after a turn -----------------------------------------------------------------------

    async def turn_recorded(self, turn_id: int, ref: ThreadRef) -> TurnUsage | None:
        """Attribute the turn's usage; the trail and the counters hear of it."""
        try:
            usage = await self.book.record(turn_id, ref)
        except StoreError as exc:
            log.error("could not record a turn's usage: %s", exc, extra={"chat_thread": ref.key})
            return None
        if usage is not None:
            self.metrics.turn(ref.channel, usage)
        return usage


def _message(message: StoredMessage, how: str) -> dict[str, object]:
    return {
        "id": message.message_id,
        "author": message.author.id,
        "name": _name(message.author),
        "text": message.text,
        "attachments": [a.name for a in message.attachments],
        "how": how,
    }


def _name(author: Author) -> str:
    return author.display_name or author.id
