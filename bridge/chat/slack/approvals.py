"""Approval requests in Slack: a message with Block Kit buttons Approve, Always in this
thread, Deny; clicks go to the core, which checks the approvers; the message is then edited
to say who decided what and when.

A click by someone the channel does not let talk to the agent, or who is not an approver,
changes nothing and is answered with an ephemeral message only that person sees.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bridge.chat.slack.access import AccessPolicy
from bridge.chat.slack.bound import ThreadCalls
from bridge.chat.slack.client import CALL_ERRORS
from bridge.chat.slack.events import PLATFORM
from bridge.chat.slack.format import mrkdwn_fallback, mrkdwn_sections
from bridge.chat.slack.users import UserDirectory
from bridge.core.events import (
    ApprovalChoice,
    ApprovalRequest,
    ApprovalResult,
    DecideOutcome,
    Inbound,
    ThreadRef,
)

log = logging.getLogger(__name__)

APPROVE_ACTION_ID = "agy_bridge_approve"
ALWAYS_ACTION_ID = "agy_bridge_always"
DENY_ACTION_ID = "agy_bridge_deny"
ACTION_CHOICES = {
    APPROVE_ACTION_ID: ApprovalChoice.APPROVE,
    ALWAYS_ACTION_ID: ApprovalChoice.ALWAYS,
    DENY_ACTION_ID: ApprovalChoice.DENY,
}
NOT_APPROVER_TEXT = "You may not approve or deny the agent's requests here; nothing changed."
ALREADY_TEXT = "This request was already decided (or expired); nothing changed."


def sections(markdown: str) -> list[dict[str, Any]]:
    """The core's request or decision text as mrkdwn sections: escaped (a command holding
    ``<!channel>`` shows as typed and pings no one), the command in a code block, each section
    within Slack's limit as Slack counts it (escaped)."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}}
        for text in mrkdwn_sections(markdown)
    ]


def request_blocks(request: ApprovalRequest) -> list[dict[str, Any]]:
    buttons: list[dict[str, Any]] = [
        {
            "type": "button",
            "action_id": APPROVE_ACTION_ID,
            "text": {"type": "plain_text", "text": "Approve"},
            "style": "primary",
            "value": request.thread.key,
        }
    ]
    if request.always:
        buttons.append(
            {
                "type": "button",
                "action_id": ALWAYS_ACTION_ID,
                "text": {"type": "plain_text", "text": "Always in this thread"},
                "value": request.thread.key,
            }
        )
    buttons.append(
        {
            "type": "button",
            "action_id": DENY_ACTION_ID,
            "text": {"type": "plain_text", "text": "Deny"},
            "style": "danger",
            "value": request.thread.key,
        }
    )
    return [
        *sections(request.text),
        {"type": "actions", "block_id": "agy_bridge_approval", "elements": buttons},
    ]


class SlackApprovals:
    """Posts, edits and answers approval requests for the Slack adapter."""

    def __init__(
        self,
        access: AccessPolicy,
        users: UserDirectory,
        *,
        calls: Callable[[ThreadRef], ThreadCalls],
    ) -> None:
        self._access = access
        self._users = users
        # A request posted beside a running reply is reported to it (see bound.py).
        self._calls = calls

    async def ask(self, request: ApprovalRequest) -> str:
        thread = request.thread
        response = await self._calls(thread).say(
            "approval request", text=mrkdwn_fallback(request.text), blocks=request_blocks(request)
        )
        return str(response["ts"])

    async def settle(self, request: ApprovalRequest, handle: str, result: ApprovalResult) -> None:
        thread = request.thread
        await self._calls(thread).edit(
            "approval decision",
            handle,
            text=mrkdwn_fallback(result.text),
            blocks=sections(result.text),
        )

    async def on_action(
        self, inbound: Inbound, body: dict[str, Any], action: dict[str, Any]
    ) -> None:
        """A click on one of the request's buttons (acknowledged already)."""
        choice = ACTION_CHOICES.get(str(action.get("action_id") or ""))
        user = str((body.get("user") or {}).get("id") or "")
        container = body.get("container") or {}
        channel = str((body.get("channel") or {}).get("id") or container.get("channel_id") or "")
        handle = str(container.get("message_ts") or (body.get("message") or {}).get("ts") or "")
        try:
            thread = ThreadRef.from_key(str(action.get("value") or ""))
        except ValueError:
            return
        if (
            choice is None
            or thread.platform != PLATFORM
            or thread.channel != channel
            or not user
            or not handle
        ):
            log.warning("Slack: an approval button for another thread was ignored")
            return
        if not self._access.allows(user, channel):
            await self._tell(user, thread, NOT_APPROVER_TEXT)
            return
        try:
            outcome = await inbound.decide(thread, handle, choice, await self._users.author(user))
        except Exception:
            log.exception("Slack: deciding a request in %s failed", thread.key)
            return
        if outcome is DecideOutcome.NOT_APPROVER:
            await self._tell(user, thread, NOT_APPROVER_TEXT)
        elif outcome is DecideOutcome.UNKNOWN:
            await self._tell(user, thread, ALREADY_TEXT)

    async def _tell(self, user: str, thread: ThreadRef, text: str) -> None:
        """An ephemeral message only ``user`` sees."""
        try:
            await self._calls(thread).whisper("approval notice", user, text)
        except CALL_ERRORS:
            pass  # logged by with_retries
