"""The reports: usage and budgets (charts per day by channel and by person), the audit trail
with its chain's state, schedules with their last runs, and the instances' health."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime
from zoneinfo import ZoneInfo

from starlette.requests import Request
from starlette.responses import Response

from bridge.core.events import ThreadRef
from bridge.core.team.audit import Selection
from bridge.core.team.budgets import subject_of
from bridge.web.charts import stacked_bars
from bridge.web.context import console_of
from bridge.web.pages import refused, show, signed_in

USAGE_DAYS = 30
AUDIT_SHOWN = 200
ADMINS_ONLY = "This page is for the console's admins ([web] admins)."


async def usage(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    console = console_of(request)
    core, scrub = console.core, console.pages.scrub
    zone = ZoneInfo(core.config.bridge.timezone)
    rows = await core.store.database.fetch(
        "SELECT thread_key, person, person_name, channel, at, total_tokens, cost"
        " FROM usage_shares WHERE at >= ? ORDER BY at",
        (time.time() - USAGE_DAYS * 86400,),
    )
    by_channel: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_person: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    seen: dict[str, bool] = {}
    channels: dict[str, ThreadRef] = {}
    for row in rows:
        key = str(row["thread_key"])
        if key not in seen:
            seen[key] = await console.access.sees(visit.viewer, ThreadRef.from_key(key))
        if not seen[key]:
            continue
        day = datetime.fromtimestamp(float(row["at"]), zone).strftime("%Y-%m-%d")
        channel, person = str(row["channel"]), str(row["person_name"] or row["person"])
        tokens, cost = int(row["total_tokens"]), float(row["cost"] or 0.0)
        by_channel[day][channel] += tokens
        by_person[day][person] += tokens
        for total in (totals[("channel", channel)], totals[("person", person)]):
            total[0] += tokens
            total[1] += cost
        channels.setdefault(channel, ThreadRef.from_key(key))
    # Every day of the window has its bar's place, a day without usage too.
    for back in range(USAGE_DAYS):
        day = datetime.fromtimestamp(time.time() - back * 86400, zone).strftime("%Y-%m-%d")
        by_channel.setdefault(day, defaultdict(int))
        by_person.setdefault(day, defaultdict(int))
    budgets = []
    if core.team is not None:
        team = core.team
        for budget in team.budgets.budgets:
            subjects = {
                subject
                for ref in [
                    *channels.values(),
                    ThreadRef(platform=visit.viewer.platform, channel=""),
                ]
                if (subject := subject_of(budget, visit.viewer.id, ref)) is not None
            }
            for subject in sorted(subjects):
                budgets.append(await team.budgets.standing(budget, subject))
    return show(
        request,
        visit,
        "usage.html",
        by_channel=stacked_bars("Tokens per day by channel", by_channel, scrub),
        by_person=stacked_bars("Tokens per day by person", by_person, scrub),
        totals=sorted(totals.items(), key=lambda item: -item[1][0]),
        budgets=budgets,
        days=USAGE_DAYS,
        currency=core.config.pricing.currency,
    )


async def audit(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    if not visit.viewer.admin:
        return refused(request, ADMINS_ONLY)
    console = console_of(request)
    if console.core.team is None:
        return show(request, visit, "audit.html", records=[], verdict=None, f={})
    q = request.query_params
    f = {name: q.get(name, "").strip() for name in ("person", "channel", "thread", "kind", "days")}
    days = float(f["days"]) if f["days"].replace(".", "", 1).isdigit() else 7.0
    selection = Selection(
        since=time.time() - days * 86400,
        person=f["person"] or None,
        channel=f["channel"] or None,
        thread=f["thread"] or None,
    )
    trail = console.core.team.audit
    records = [r for r in await trail.records(selection) if not f["kind"] or r.kind == f["kind"]]
    return show(
        request,
        visit,
        "audit.html",
        records=list(reversed(records))[:AUDIT_SHOWN],
        verdict=await trail.verify(),
        f=f,
    )


async def schedules(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    console = console_of(request)
    scheduler = console.core.scheduler
    shown = []
    if scheduler is not None:
        for schedule in await scheduler.schedules():
            ref = ThreadRef(
                platform=schedule.platform, channel=schedule.channel, thread=schedule.thread
            )
            if await console.access.sees(visit.viewer, ref):
                shown.append((schedule, await scheduler.store.runs(schedule.key, 5)))
    return show(request, visit, "schedules.html", schedules=shown)


async def instances(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    if not visit.viewer.admin:
        return refused(request, ADMINS_ONLY)
    core = console_of(request).core
    db = core.store.database
    leases = await db.fetch(
        "SELECT owner, COUNT(*) AS threads, MAX(expires_at) AS until FROM leases"
        " WHERE expires_at > ? GROUP BY owner ORDER BY owner",
        (time.time(),),
    )
    return show(
        request,
        visit,
        "instances.html",
        here=core.leases.name,
        leases=leases,
        processes=await core.store.processes(),
        slots=core.slots,
        local_threads=len(core.threads),
        isolation=core.runtime.isolation_status(),
        store_ok=await db.ping(),
        store_where=db.where,
        shared=db.shared,
        running=await core.store.running_turns(),
        waiting=len(await core.store.waiting_approvals()),
    )
