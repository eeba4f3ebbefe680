"""Each turn's usage, attributed to people (docs/team-controls.md, "Usage").

agy's ``result.usage`` is the conversation's running total: earlier turns, earlier processes and
the conversation before a ``--conversation`` resume are all inside it. A turn's own usage is the
difference from the total its conversation had at the end of the turn before (the ``turns``
table keeps each turn's total); a conversation with no earlier turn starts from zero. A total
smaller than the one before (agy started counting again) is taken whole. The difference is
:func:`bridge.core.tokens.turn_delta`, the one the summary under the answer shows too.

A turn is attributed to the authors of its messages (taken as the turn or injected into it),
split evenly: tokens are whole numbers, so what does not divide goes one token each to the
first authors in the order they wrote. A turn nobody typed belongs to ``bridge``. The rows
are keyed by (turn, person): recording a turn twice counts it once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from bridge.core.events import Author, ThreadRef
from bridge.core.store.rows import Database, MessageState, Tx, Usage
from bridge.core.tokens import Tokens, turn_delta
from bridge.team_settings import PricingSection

# Who a turn nobody typed is attributed to.
BRIDGE = "bridge"
# The model when neither the thread nor the configuration names one (agy's own default).
DEFAULT_MODEL = "default"


def split(tokens: Tokens, people: int) -> list[Tokens]:
    """Evenly over ``people``; the remainder one token each to the first ones."""
    if people <= 1:
        return [tokens]
    fields = (tokens.input, tokens.output, tokens.thinking, tokens.cache_read, tokens.total)
    shares = []
    for index in range(people):
        shares.append(
            Tokens(*(value // people + (1 if index < value % people else 0) for value in fields))
        )
    return shares


def cost_of(tokens: Tokens, model: str, pricing: PricingSection) -> float | None:
    """The cost of ``tokens`` on ``model`` in ``pricing.currency``; None when unpriced."""
    price = pricing.models.get(model)
    if price is None:
        return None
    return (
        tokens.input * price.input
        + tokens.output * price.output
        + tokens.cache_read * price.cache_read
    ) / 1_000_000


@dataclass(frozen=True, slots=True)
class Share:
    person: str
    name: str
    tokens: Tokens
    cost: float | None


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """A recorded turn's usage and who it is attributed to."""

    turn_id: int
    model: str
    tokens: Tokens
    cost: float | None
    shares: tuple[Share, ...]


def attribute(tokens: Tokens, cost: float | None, authors: list[Author]) -> tuple[Share, ...]:
    """The shares of a turn's usage, one per distinct author in the order they wrote."""
    people: dict[str, str] = {}
    for author in authors:
        people.setdefault(author.id, author.display_name or author.id)
    if not people:
        people = {BRIDGE: BRIDGE}
    parts = split(tokens, len(people))
    each = cost / len(people) if cost is not None else None
    return tuple(
        Share(person, name, part, each)
        for (person, name), part in zip(people.items(), parts, strict=True)
    )


@dataclass(frozen=True, slots=True)
class Filter:
    """Which usage rows a sum counts: all of them, narrowed by each field that is set."""

    person: str | None = None
    thread_key: str | None = None
    channel: str | None = None
    people: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()

    def where(self) -> tuple[str, list[object]]:
        clauses: list[str] = []
        params: list[object] = []
        for column, value in (
            ("person", self.person),
            ("thread_key", self.thread_key),
            ("channel", self.channel),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        for column, values in (("person", self.people), ("channel", self.channels)):
            if values:
                clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
                params.extend(values)
        return "".join(f" AND {c}" for c in clauses), params


@dataclass(frozen=True, slots=True)
class Sum:
    tokens: Tokens = field(default_factory=Tokens)
    cost: float = 0.0
    turns: int = 0


_SUM = (
    "SELECT COALESCE(SUM(input_tokens), 0) AS i, COALESCE(SUM(output_tokens), 0) AS o,"
    " COALESCE(SUM(thinking_tokens), 0) AS th, COALESCE(SUM(cache_read_tokens), 0) AS c,"
    " COALESCE(SUM(total_tokens), 0) AS t, COALESCE(SUM(cost), 0) AS cost,"
    " COUNT(DISTINCT turn_id) AS turns FROM usage_shares WHERE at >= ? AND at < ?"
)


class UsageBook:
    """The store's usage rows: recording a turn, and sums over a period."""

    def __init__(self, db: Database, pricing: PricingSection, default_model: str = ""):
        self._db = db
        self.pricing = pricing
        self.default_model = default_model or DEFAULT_MODEL

    @property
    def database(self) -> Database:
        return self._db

    def model_for(self, thread_model: str | None) -> str:
        return thread_model or self.default_model

    async def record(self, turn_id: int, ref: ThreadRef) -> TurnUsage | None:
        """Attribute a finished turn's usage (its row already holds agy's totals); None when
        agy reported none (the next turn's difference carries it).

        The model is the thread's (`!model`), else ``[agy] model``, else "default": agy's
        ``init`` names the model only when the bridge passed ``--model``, which is the same.
        """
        async with self._db.transaction() as tx:
            rows = await tx.fetch(
                "SELECT turns.conversation_id, turns.usage_json, threads.model FROM turns"
                " LEFT JOIN threads ON threads.key = turns.thread_key WHERE turns.id = ?",
                (turn_id,),
            )
            if not rows or not rows[0]["usage_json"]:
                return None
            model = self.model_for(rows[0]["model"])
            current = Usage.model_validate_json(rows[0]["usage_json"])
            previous = await self._previous(tx, ref.key, turn_id, rows[0]["conversation_id"])
            tokens = turn_delta(current, previous)
            cost = cost_of(tokens, model, self.pricing)
            shares = attribute(tokens, cost, await self._authors(tx, turn_id))
            now = time.time()
            for share in shares:
                t = share.tokens
                await tx.execute(
                    "INSERT INTO usage_shares (turn_id, person, person_name, thread_key,"
                    " platform, channel, model, at, input_tokens, output_tokens,"
                    " thinking_tokens, cache_read_tokens, total_tokens, cost)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (turn_id, person) DO NOTHING",
                    (
                        turn_id,
                        share.person,
                        share.name,
                        ref.key,
                        ref.platform,
                        ref.channel,
                        model,
                        now,
                        t.input,
                        t.output,
                        t.thinking,
                        t.cache_read,
                        t.total,
                        share.cost,
                    ),
                )
        return TurnUsage(turn_id, model, tokens, cost, shares)

    @staticmethod
    async def _previous(
        tx: Tx, key: str, turn_id: int, conversation_id: str | None
    ) -> Usage | None:
        if not conversation_id:
            return None
        rows = await tx.fetch(
            "SELECT usage_json FROM turns WHERE thread_key = ? AND conversation_id = ?"
            " AND id < ? AND usage_json IS NOT NULL ORDER BY id DESC LIMIT 1",
            (key, conversation_id, turn_id),
        )
        return Usage.model_validate_json(rows[0]["usage_json"]) if rows else None

    @staticmethod
    async def _authors(tx: Tx, turn_id: int) -> list[Author]:
        rows = await tx.fetch(
            "SELECT author_json FROM inbox WHERE turn_id = ? AND state IN (?, ?) ORDER BY id",
            (turn_id, MessageState.IN_TURN, MessageState.INJECTED),
        )
        return [Author.model_validate(json.loads(r["author_json"])) for r in rows]

    async def sum(self, where: Filter, start: float, end: float) -> Sum:
        clause, params = where.where()
        rows = await self._db.fetch(_SUM + clause, (start, end, *params))
        r = rows[0]
        return Sum(
            Tokens(int(r["i"]), int(r["o"]), int(r["th"]), int(r["c"]), int(r["t"])),
            float(r["cost"]),
            int(r["turns"]),
        )

    async def top_people(
        self, where: Filter, start: float, end: float, limit: int = 5
    ) -> list[tuple[str, int, float]]:
        """The people who used most (name, tokens, cost), most first."""
        clause, params = where.where()
        rows = await self._db.fetch(
            "SELECT MAX(person_name) AS name, SUM(total_tokens) AS t, COALESCE(SUM(cost), 0)"
            " AS cost FROM usage_shares WHERE at >= ? AND at < ?"
            + clause
            + " GROUP BY person ORDER BY t DESC LIMIT ?",
            (start, end, *params, limit),
        )
        return [(str(r["name"]), int(r["t"]), float(r["cost"])) for r in rows]
