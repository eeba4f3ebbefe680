"""``!web``: a one-time link that signs its sender in to the web console (docs/console.md)."""

from __future__ import annotations

import logging

from bridge.core.command_text import Command
from bridge.core.commands.registry import Core, command
from bridge.core.events import IncomingMessage
from bridge.core.signin import WebSessions

log = logging.getLogger(__name__)

ASK_IN_A_DM = "Ask me in a DM: send `!web` in a direct message with me for a sign-in link."
NOT_ENABLED = "The web console is not enabled on this bridge (`[web] enabled`)."
NO_URL = "The web console has no address set (`[web] public_url`): ask the operator."


def link_text(url: str, minutes: int) -> str:
    return (
        f"Your sign-in link for the console (works once, for {minutes} minute(s); "
        f"do not share it):\n{url}"
    )


@command("web", "`!web` (in a DM with me): a one-time sign-in link for the web console")
async def web(core: Core, message: IncomingMessage, _: Command) -> None:
    thread, web = message.thread, core.config.web
    if not web.enabled:
        await core.say(thread, NOT_ENABLED)
        return
    chat = core.members.get(thread.platform)
    # Only a chat that can tell a DM from a shared room hands out links: elsewhere anyone
    # reading the channel could use it first.
    if chat is None or not await chat.is_direct(thread.channel):
        await core.say(thread, ASK_IN_A_DM)
        return
    if not message.author.person:
        return
    base = web.public_url.rstrip("/") or f"http://{web.host}:{web.port}"
    sessions = WebSessions(core.store.database, web.link_seconds, web.session_hours * 3600)
    link = await sessions.new_link(message.author, thread.platform)
    text = link_text(f"{base}/signin/{link}", max(1, round(web.link_seconds / 60)))
    quiet = core.quiet.get(thread.platform)
    log.info("a console sign-in link was sent to %s", message.author.id)
    if quiet is not None:
        await quiet.post_without_previews(thread, text)
    else:
        await core.say(thread, text)
