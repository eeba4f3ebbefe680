"""``agy-bridge audit``: export the audit trail, or verify its hash chain.

``agy-bridge audit --config C [--since T] [--until T] [--user ID] [--channel ID] [--thread ID]
[--format jsonl|csv]`` writes the selected records to stdout, oldest first. ``agy-bridge audit
verify --config C`` walks the whole chain: exit 0 and the head when it is intact, exit 1 and
where it breaks when not (docs/team-controls.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TextIO
from zoneinfo import ZoneInfo

from bridge.config import Config
from bridge.core.store import store_url
from bridge.core.store.opening import open_store
from bridge.core.team.audit import AuditLog, AuditRecord, Selection

CSV_FIELDS = ("seq", "time", "instance", "kind", "thread", "channel", "person", "detail", "hash")
_RELATIVE = re.compile(r"^(\d+)\s*([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class TimeError(ValueError):
    pass


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """The ``audit`` command, added with ``add`` (a subparsers' ``add_parser``)."""
    audit = add("audit", help="export the audit trail (`audit verify`: check its hash chain)")
    audit.add_argument("action", nargs="?", choices=["export", "verify"], default="export")
    audit.add_argument("--config", type=Path, required=True, help="the TOML config file")
    audit.add_argument("--since", help="from this time: 2026-12-01, 2026-12-01T09:00, or 7d")
    audit.add_argument("--until", help="before this time (same forms)")
    audit.add_argument("--user", help="only this person's records (their chat id)")
    audit.add_argument("--channel", help="only this channel or room (its id)")
    audit.add_argument("--thread", help="only this thread (its id or the bridge's thread key)")
    audit.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")


def parse_time(text: str, zone: str, now: float | None = None) -> float:
    """An ISO date or time (in ``zone`` unless it names an offset) or a span back from now."""
    value = text.strip()
    if match := _RELATIVE.match(value):
        return (time.time() if now is None else now) - int(match.group(1)) * _SECONDS[
            match.group(2)
        ]
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise TimeError(f"`{text}` is not a time (2026-12-01, 2026-12-01T09:00, 7d)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(zone))
    return moment.timestamp()


def selection(args: argparse.Namespace, zone: str) -> Selection:
    return Selection(
        since=parse_time(args.since, zone) if args.since else None,
        until=parse_time(args.until, zone) if args.until else None,
        person=args.user,
        channel=args.channel,
        thread=args.thread,
    )


def write(records: Sequence[AuditRecord], form: str, out: TextIO) -> None:
    if form == "jsonl":
        for record in records:
            out.write(json.dumps(record.exported(), ensure_ascii=False) + "\n")
        return
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for record in records:
        row = record.exported()
        row["detail"] = json.dumps(row["detail"], ensure_ascii=False, sort_keys=True)
        writer.writerow(row)


async def run(config: Config, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        chosen = selection(args, config.bridge.timezone)
    except TimeError as exc:
        err.write(f"agy-bridge audit: {exc}\n")
        return 2
    async with open_store(store_url(config)) as store:
        log = AuditLog(store.database)
        if args.action == "verify":
            verdict = await log.verify()
            if verdict.intact:
                out.write(
                    f"audit trail intact: {verdict.checked} record(s); "
                    f"head {verdict.head or '(empty)'}\n"
                )
                return 0
            err.write(
                f"audit trail BROKEN (first bad record: {verdict.first_bad}); "
                f"{verdict.checked} record(s) checked:\n"
            )
            for problem in verdict.problems:
                err.write(f"  - {problem}\n")
            return 1
        write(await log.records(chosen), args.format, out)
    return 0
