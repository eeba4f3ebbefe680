"""``!schedule``: prompts people schedule from a thread (docs/schedules.md)."""

from __future__ import annotations

import re

from bridge.core.command_text import Command
from bridge.core.commands.registry import Core, command
from bridge.core.events import IncomingMessage
from bridge.core.schedules import texts
from bridge.core.schedules.model import CHAT_PREFIX, Schedule, configured
from bridge.cron_times import BadCron, check, is_zone

USAGE = (
    'Usage: `!schedule add "<cron>" [time zone] [--here] <prompt>`, for example '
    '`!schedule add "0 9 * * 1-5" Europe/Paris triage the issues opened yesterday`; '
    "`!schedule list`; `!schedule remove <id>`."
)
# Typographic quotes (what phones and Slack's editor type) count as plain ones.
_QUOTES = str.maketrans({q: '"' for q in "“”„‟«»「」‘’‚‛'"})
_QUOTED = re.compile(r'^"([^"]*)"\s*(.*)$', re.S)


@command(
    "schedule",
    '`!schedule add "<cron>" [tz] <prompt>`: a prompt run on a schedule as you (`--here`: here)',
    "`!schedule list`: this channel's schedules, their next and last runs",
    "`!schedule remove <id>`: remove a schedule (its author or an approver)",
)
async def schedule(core: Core, message: IncomingMessage, parsed: Command) -> None:
    word, _, rest = parsed.arg.partition(" ")
    word = word.strip().lower()
    if core.scheduler is None:
        await core.say(message.thread, "Schedules are not running on this bridge.")
    elif word == "add":
        await core.say(message.thread, await _add(core, message, rest))
    elif word == "list":
        await core.say(message.thread, await _list(core, message))
    elif word in ("remove", "rm", "delete"):
        await core.say(message.thread, await _remove(core, message, rest.strip()))
    else:
        await core.say(message.thread, USAGE)


def parse_add(text: str, default_zone: str) -> tuple[str, str, bool, str]:
    """``"<cron>" [zone] [--here] prompt`` as (cron, zone, here, prompt); ValueError: why not."""
    matched = _QUOTED.match(text.strip().translate(_QUOTES))
    if matched is None:
        raise ValueError("put the cron expression in quotes")
    expr, rest = " ".join(matched.group(1).split()), matched.group(2)
    zone, here = "", False
    words = rest.split(" ")
    while words:
        first = words[0]
        if first == "--here" and not here:
            here = True
        elif not zone and ("/" in first or first.upper() == "UTC") and is_zone(first):
            zone = first
        elif not zone and "/" in first and first[:1].isupper():
            raise BadCron(f"unknown time zone `{first}` (an IANA name such as Europe/Paris)")
        else:
            break
        words.pop(0)
    prompt = " ".join(words).strip()
    if not prompt:
        raise ValueError("say what the agent should do after the cron expression")
    return expr, zone or default_zone, here, prompt


async def _add(core: Core, message: IncomingMessage, text: str) -> str:
    assert core.scheduler is not None
    try:
        expr, zone, here, prompt = parse_add(text, core.config.bridge.timezone)
        check(expr, zone)
    except ValueError as exc:  # BadCron is one
        return f"{message.author.label}: {exc}.\n{USAGE}"
    thread = message.thread
    added = await core.scheduler.add(
        Schedule(
            key="",
            platform=thread.platform,
            channel=thread.channel,
            thread=thread.thread if here else "",
            cron=expr,
            timezone=zone,
            prompt=prompt,
            author=message.author,
        )
    )
    now = core.scheduler.clock.now()
    return (
        f"Scheduled `{added.id}` for {message.author.label}: `{expr}` ({zone}), "
        f"{'in this thread' if here else 'a new thread each run'}. "
        f"Next run: {texts.next_text(added, now)}. It runs as you: your access and budget "
        f"are checked at each run. `!schedule remove {added.id}` removes it."
    )


async def _list(core: Core, message: IncomingMessage) -> str:
    assert core.scheduler is not None
    store = core.scheduler.store
    here = message.thread
    mine = [
        s
        for s in configured(core.config)
        if (s.platform, s.channel) == (here.platform, here.channel)
    ]
    mine += await store.chat_schedules(here.platform, here.channel)
    if not mine:
        return "No schedules in this channel. " + USAGE
    now = core.scheduler.clock.now()
    entries = [texts.list_entry(s, await store.runs(s.key), now) for s in mine]
    return "Schedules in this channel:\n" + "\n".join(entries)


async def _remove(core: Core, message: IncomingMessage, ident: str) -> str:
    assert core.scheduler is not None
    if not ident:
        return USAGE
    if any(s.id == ident for s in configured(core.config)):
        return f"`{ident}` is in the bridge's configuration: its operator removes it there."
    here = message.thread
    found = [
        s
        for s in await core.scheduler.store.chat_schedules(here.platform, here.channel)
        if s.id == ident
    ]
    if not found:
        return f"No schedule `{ident}` in this channel (`!schedule list` shows them)."
    [target] = found
    who = message.author
    approver = who.id in core.config.approvals.approvers
    if target.author is not None and target.author.id != who.id and not approver:
        return (
            f"{who.label}: only its author ({target.author.label}) or an approver may remove "
            f"`{ident}`."
        )
    await core.scheduler.store.remove(CHAT_PREFIX + ident)
    if core.team is not None:
        await core.team.audit.append(
            "schedule_removed", thread=here, person=who, schedule=ident, cron=target.cron
        )
    return f"Schedule `{ident}` removed."
