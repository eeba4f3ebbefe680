"""The team controls a thread's turns go through: budgets before, usage and audit after.

:meth:`TeamControls.screen` is the budget check on every turn's path: before a turn takes the
inbox and before a hook call injects into a running turn, each waiting message's author is
checked against the budgets that apply; a message over a limit leaves ``pending`` as
``refused`` (kept, never sent), and the thread is told which budget, what was used and when it
resets. A running turn is never cut. With no ``[[budgets]]`` it costs nothing.
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
from bridge.core.team.audit import AuditLog
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
        tell the thread once per period about a budget past its warning level."""
        if not self.budgets.enabled:
            return None
        now = time.time()
        standings: dict[str, tuple[Standing, ...]] = {}
        for author in ask.who:
            if author.id not in standings:
                standings[author.id] = tuple(await self.budgets.check(author, ask.where, now))
        reading = Reading(ask, standings)
        for author in dict.fromkeys(ask.who):
            if any(s.over for s in standings[author.id]):
                continue  # refused, and told so
            for s in standings[author.id]:
                if s.warned and await self.budgets.first_notice(s, ask.where.key):
                    await say(ask.where, warning_text(_name(author), s, self.currency))
        self.policy.expect(reading)
        return reading

    async def judged(
        self,
        ref: ThreadRef,
        reading: Reading | None,
        verdict: Verdict,
        messages: list[StoredMessage],
        turn_id: int,
        conversation: str | None = None,
    ) -> None:
        """The policy answered: a refusal over a budget, or a turn that starts, is audited."""
        if isinstance(verdict, Refuse) and reading is not None:
            over = reading.over()
            for message in messages:
                standing = next(
                    (s for s in reading.standings.get(message.author.id, ()) if s.over),
                    over[0][1] if over else None,  # else refused with the turn it was in
                )
                if standing is not None:
                    await self._refused(reading.ask, message, standing, turn_id)
        elif isinstance(verdict, Go) and conversation is not None:
            await self.turn_started(ref, turn_id, conversation, messages)

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
        """Who asked, with their messages (queued for this turn, or typed while it was idle)."""
        await self.audit.append(
            "turn_started",
            thread=ref,
            person=messages[-1].author if messages else None,
            turn=turn_id,
            conversation=conversation,
            messages=[_message(m, "turn") for m in messages],
        )

    async def injected(self, ref: ThreadRef, turn_id: int, messages: list[StoredMessage]) -> None:
        for message in messages:
            await self.audit.append(
                "message_injected",
                thread=ref,
                person=message.author,
                turn=turn_id,
                message=message.message_id,
                text=message.text,
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
