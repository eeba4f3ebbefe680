"""The commands about one thread's agent: stop, model, new conversation, retry, status,
approvals, help."""

from __future__ import annotations

import functools
import logging

from bridge.core import recovery, retry
from bridge.core.approvals.hook_health import status_line as hooks_status_line
from bridge.core.command_text import Command
from bridge.core.commands.pulls import status_lines as pull_status_lines
from bridge.core.commands.registry import REGISTRY, Core, command
from bridge.core.disk import status_line as disk_status
from bridge.core.events import IncomingMessage
from bridge.core.router import NotHere
from bridge.core.status import approvals_text, status_text
from bridge.core.team import commands as team_commands
from bridge.core.thread import commands as c
from bridge.core.workspaces import place_for

log = logging.getLogger(__name__)


@command("stop", "`!stop`: interrupt the agent's running turn")
async def stop(core: Core, message: IncomingMessage, _: Command) -> None:
    await core.stop(message.thread, message.author)


@command(
    "model",
    "`!model`: show the model; `!model <id>`: switch this thread's model (same conversation)",
)
async def model(core: Core, message: IncomingMessage, parsed: Command) -> None:
    thread, wanted = message.thread, parsed.arg
    if not wanted:
        row = await core.store.thread(thread.key)
        current = row.model or core.config.agy.model or "agy's default model"
        await core.say(thread, f"Model for this thread: `{current}`.")
        return
    if any(ch.isspace() for ch in wanted) or len(wanted) > 200:
        await core.say(thread, "A model id is one word, as `agy models` lists it.")
        return
    await core.store.ensure_thread(thread)
    await core.store.set_model(thread.key, wanted)
    await core.router.send(thread, c.SetModel(wanted, message.author))
    await core.say(
        thread, f"Model for this thread is now `{wanted}` (same conversation, from next turn)."
    )


@command("new", "`!new`: start a fresh conversation for this thread")
async def new(core: Core, message: IncomingMessage, _: Command) -> None:
    await core.store.reset_conversation(message.thread.key)
    await core.router.send(message.thread, c.NewConversation(message.author))
    await core.say(message.thread, "Starting a fresh conversation from the next message.")
    await core.conversation_reset(message.thread)


@command("retry", "`!retry`: send the request a bridge restart or failover interrupted again, once")
async def retry_cut_off(core: Core, message: IncomingMessage, _: Command) -> None:
    """The request a restart or failover cut off, sent again on a person's word, once."""
    thread, by = message.thread, message.author
    again = await retry.messages_again(core.store, message)
    if isinstance(again, str):
        await core.say(thread, again)
        return
    turn_id, stored = again
    log.info(
        "a cut-off request was sent again (!retry) by %s",
        by.label,
        extra={"chat_thread": thread.key, "turn": turn_id},
    )
    await core.say(thread, retry.sent_text(by, len(stored)))
    actor = await core.router.actor_for(thread)
    if not isinstance(actor, NotHere):
        for message_id, row_id in stored:
            actor.tell(c.MessageStored(message_id, row_id))


@command("status", "`!status`: process, conversation, queue and usage of this thread")
async def status(core: Core, message: IncomingMessage, _: Command) -> None:
    thread = message.thread
    actor = core.router.local(thread.key)
    text = await status_text(
        core.store,
        thread.key,
        actor,
        core.slots,
        await core.cluster.status_line(thread, actor is not None),
        core.config.agy.model,
        core.runtime.isolation_status(),
        core.config.approvals,
        (
            *((await team_commands.status_line(core.team, thread),) if core.team else ()),
            *((await core.scheduler.status_lines(thread)) if core.scheduler else ()),
            *(await pull_status_lines(core, thread)),
            *filter(None, [hooks_status_line(core.hook_health, thread.key)]),
        ),
        disk_line=await disk_status(core.disk, place_for(core.config, thread).workdir),
        reachable=functools.partial(
            recovery.conversation_kept, core.store, core.runtime, core.config, thread
        ),
    )
    await core.say(thread, text)


@command(
    "approvals",
    "`!approvals`: requests waiting for approval and this thread's allow list",
    "`!approvals reset`: clear this thread's allow list",
)
async def approvals(core: Core, message: IncomingMessage, parsed: Command) -> None:
    thread, arg = message.thread, parsed.arg
    if arg.lower() == "reset":
        removed = await core.store.clear_allowed(thread.key)
        await core.router.send(thread, c.ForgetAllowList())
        await core.say(
            thread,
            f"This thread's allow list is cleared ({removed} pattern(s) removed); "
            "those commands ask again.",
        )
    elif arg:
        await core.say(thread, "`!approvals` lists; `!approvals reset` clears the list.")
    else:
        mode = core.config.approvals.mode
        await core.say(thread, await approvals_text(core.store, thread.key, mode))


@command("help", "`!help`: this list")
async def show_help(core: Core, message: IncomingMessage, _: Command) -> None:
    await core.say(message.thread, REGISTRY.help_text())
