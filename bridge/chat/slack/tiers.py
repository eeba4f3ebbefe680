"""Slack's rate table in one place: method -> tier, read by the app's rate budget
(:mod:`bridge.chat.slack.budget`) and by the tests' fake Slack, so the two cannot disagree.

Slack limits each Web API method per workspace and app (docs.slack.dev "Rate limits" and each
method's page): Tier 2 about 20 calls a minute, Tier 3 about 50, Tier 4 about 100;
``chat.postMessage`` about one a second per channel, with short bursts. A few methods count
elsewhere: ``assistant.threads.setStatus`` has its own limit per thread (about 60 a minute).
``agents.sessions.setStatus`` and ``agents.sessions.rename`` are Tier 3 (slack-sdk's and the
Java SDK's rate tables; the methods' pages name no special limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Scope = Literal["app", "channel", "thread"]


@dataclass(frozen=True)
class Tier:
    """At most ``limit`` calls in any ``window`` seconds, ``burst`` of them at once, counted
    per app (workspace), per channel or per thread (``scope``)."""

    limit: int
    window: float = 60.0
    burst: float = 0.0  # 0: a quarter of the limit
    scope: Scope = "app"

    @property
    def per_channel(self) -> bool:
        return self.scope == "channel"

    @property
    def capacity(self) -> float:
        return self.burst or max(1.0, self.limit / 4)

    @property
    def rate(self) -> float:
        """Tokens per second."""
        return max(self.limit - self.capacity, 1.0) / self.window


TIER_2 = Tier(20)
TIER_3 = Tier(50)
TIER_4 = Tier(100)

SLACK_TIERS: Mapping[str, Tier] = {
    "chat.postMessage": Tier(10, window=10.0, burst=2.0, scope="channel"),
    "chat.update": TIER_3,
    "chat.delete": TIER_3,
    "chat.startStream": TIER_2,
    "chat.appendStream": TIER_4,
    "chat.stopStream": TIER_2,
    "chat.postEphemeral": TIER_4,
    "assistant.threads.setStatus": Tier(60, scope="thread"),
    "assistant.threads.setSuggestedPrompts": TIER_3,
    "agents.sessions.setStatus": TIER_3,
    "agents.sessions.rename": TIER_3,
    "reactions.add": TIER_3,
    "reactions.remove": TIER_2,
    "conversations.replies": TIER_3,
    "conversations.history": TIER_3,
    "users.info": TIER_4,
    "files.info": TIER_4,
    "views.publish": TIER_4,
    "chat.getPermalink": TIER_4,
    "conversations.info": TIER_3,
    "conversations.members": TIER_4,
}


def scope_key(tier: Tier, args: Mapping[str, Any] | None) -> str:
    """What a call of a method with ``tier`` is counted under: "" for the app, else the
    channel, or the channel and thread, its arguments name."""
    if tier.scope == "app" or not args:
        return ""
    channel = str(args.get("channel") or args.get("channel_id") or "")
    if tier.scope == "channel":
        return channel
    return f"{channel}/{args.get('thread_ts') or ''}"
