"""The scheduler: one task in the core's task group, on every instance that serves a
schedule's chat.

At every tick it reads the wall clock and, for each schedule, the latest time its cron names
(never a time it computed before a sleep: a suspended or stalled host neither skips nor bunches
runs). A time after the schedule's last claimed run is due: within ``catch_up`` it is claimed
(``schedule_runs``' primary key: one instance, once) and run; later than that it is claimed as
skipped and the channel is told. Older missed times are not run (one run after downtime, not a
burst). A clock that goes back finds nothing after the last claimed run.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import anyio

from bridge.config import Config
from bridge.core.capabilities import OpensThreads
from bridge.core.events import Author, ChannelRef, IncomingMessage, ThreadRef
from bridge.core.schedules import texts
from bridge.core.schedules.clock import Clock
from bridge.core.schedules.model import CHAT_PREFIX, GRACE, Schedule, configured
from bridge.core.schedules.store import RunState, ScheduleStore
from bridge.core.store.rows import StoreError
from bridge.cron_times import explain, latest_at_or_before, next_after

if TYPE_CHECKING:
    from bridge.core.cluster import Cluster
    from bridge.core.events import ChatAdapter, SubmitOutcome
    from bridge.core.store import Store
    from bridge.core.team.controls import TeamControls

log = logging.getLogger(__name__)

# The longest sleep between ticks: a clock that jumps (or a host that slept) is seen this soon.
MAX_SLEEP = 30.0
# How often a run waiting for a busy room looks again (the turn's end is in the store).
BUSY_POLL = 2.0


@dataclass(frozen=True)
class PersonSchedule:
    """One of a person's schedules, as a home view lists it."""

    id: str
    thread: ThreadRef | None  # the thread it posts in; None: a new thread each run
    place: ChannelRef
    when: str  # "At 09:00 on Monday through Friday (Europe/Paris)"
    what: str  # the prompt
    next_at: float | None  # Unix time


class Core(Protocol):
    """What the scheduler uses of the core (:class:`bridge.core.core.Core` is one)."""

    config: Config
    store: Store
    adapters: Mapping[str, ChatAdapter]
    cluster: Cluster
    team: TeamControls | None

    async def start_thread(
        self,
        place: ChannelRef,
        text: str,
        author: Author,
        *,
        model: str | None = None,
        event_id: str | None = None,
        workspace: str | None = None,
    ) -> ThreadRef: ...

    async def submit(self, message: IncomingMessage) -> SubmitOutcome: ...

    async def say(self, thread: ThreadRef, text: str) -> None: ...


class Scheduler:
    def __init__(self, core: Core, clock: Clock, instance: str) -> None:
        self.core = core
        self.clock = clock
        self.instance = instance
        self.store = ScheduleStore(core.store.database)
        # Set once the chats are connected (Core.recover): a run due at start waits for them.
        self.ready = anyio.Event()
        # Runs waiting for a busy room (set by run(); a tick called alone waits inline).
        self._waiting: anyio.abc.TaskGroup | None = None

    # --- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        await self.ready.wait()
        async with anyio.create_task_group() as self._waiting:
            while True:
                try:
                    wait = await self.tick()
                except StoreError:
                    log.warning("schedules: the store did not answer; trying again", exc_info=True)
                    wait = MAX_SLEEP
                await self.clock.sleep(wait)

    async def tick(self) -> float:
        """Make every run due now; the seconds until the next one (at most :data:`MAX_SLEEP`)."""
        now = self.clock.now()
        wait = MAX_SLEEP
        for schedule in await self.schedules():
            if not self.serves(schedule):
                continue
            try:
                await self._one(schedule, now)
            except StoreError:
                raise
            except Exception:  # one schedule's failure never stops the others
                log.exception("schedule %s failed", schedule.key)
            upcoming = next_after(schedule.cron, schedule.timezone, now)
            if upcoming is not None:
                wait = min(wait, max((upcoming - now).total_seconds(), 0.0))
        return wait

    async def schedules(self) -> list[Schedule]:
        return [*configured(self.core.config), *await self.store.chat_schedules()]

    def serves(self, schedule: Schedule) -> bool:
        return schedule.platform in self.core.adapters and self.core.cluster.serves(
            schedule.platform
        )

    # --- chat schedules -------------------------------------------------------------------

    async def add(self, schedule: Schedule) -> Schedule:
        """Store a chat schedule under a new short id (its author, place and cron set)."""
        for _ in range(5):
            keyed = Schedule(**{**schedule.__dict__, "key": CHAT_PREFIX + uuid.uuid4().hex[:6]})
            if await self.store.add(keyed, self.clock.now().timestamp()):
                return keyed
        raise StoreError("no free schedule id")

    async def status_lines(self, thread: ThreadRef) -> tuple[str, ...]:
        """``!status``: the schedule whose run this thread holds, and as whom it runs."""
        found = await self.store.latest_run_in(thread.key)
        if found is None:
            return ()
        key, due = found
        schedule = next((s for s in await self.schedules() if s.key == key), None)
        if schedule is None:
            return (f"• Scheduled run: `{key.split(':', 1)[1]}` (removed since)",)
        return (
            f"• Scheduled run: `{schedule.id}` (`{schedule.cron}`, {schedule.timezone}), as "
            f"{texts.who(schedule)}, last at {texts.when(due, schedule.timezone)}",
        )

    async def person_schedules(self, platform: str, user_id: str) -> list[PersonSchedule]:
        """The schedules a person added (for a home view such as Slack's App Home)."""
        now = self.clock.now()
        found = []
        for schedule in await self.store.chat_schedules():
            author = schedule.author
            if schedule.platform != platform or author is None or author.id != user_id:
                continue
            upcoming = next_after(schedule.cron, schedule.timezone, now)
            found.append(
                PersonSchedule(
                    id=schedule.id,
                    thread=schedule.target,
                    place=schedule.place,
                    when=explain(schedule.cron, schedule.timezone),
                    what=schedule.prompt,
                    next_at=upcoming.timestamp() if upcoming else None,
                )
            )
        return found

    # --- one schedule ---------------------------------------------------------------------

    async def _one(self, schedule: Schedule, now: datetime) -> None:
        last = await self.store.last_due(schedule.key)
        since: float | None = last
        if since is None:
            since = await self.store.created_at(schedule.key)
            if since is None:  # a config schedule seen for the first time: nothing owed yet
                await self.store.add(schedule, now.timestamp())
                return
        due = latest_at_or_before(schedule.cron, schedule.timezone, now)
        if due is None or due.timestamp() <= since:
            return
        at = int(due.timestamp())
        late = (now - due).total_seconds()
        if late <= max(schedule.catch_up, GRACE):
            if await self.store.claim(schedule.key, at, self.instance, RunState.CLAIMED):
                await self._run(schedule, due, at)
        elif await self.store.claim(schedule.key, at, self.instance, RunState.SKIPPED):
            log.info("schedule %s: the run at %s is skipped (%.0f s late)", schedule.key, due, late)
            await self._tell(schedule, texts.skipped_text(schedule, due, now))
            await self._audit(schedule, None, due, "skipped")

    async def _run(self, schedule: Schedule, due: datetime, at: int) -> None:
        reason = await self._refusal(schedule, due)
        if reason:
            await self.store.settle(schedule.key, at, RunState.REFUSED, reason)
            await self._tell(schedule, texts.refused_text(schedule, due, reason))
            await self._audit(schedule, None, due, "refused", reason=reason)
            return
        room = ThreadRef(platform=schedule.platform, channel=schedule.channel)
        if schedule.target is None and await self.store.thread_busy(room.key):
            # A room without threads is one conversation: a new "thread" is the room itself,
            # and a person's turn runs there. The run waits for it (never joins it).
            await self._tell(schedule, texts.waiting_text(schedule))
            if self._waiting is not None:
                self._waiting.start_soon(self._when_idle, schedule, due, at, room)
            else:
                await self._when_idle(schedule, due, at, room)
            return
        await self._make(schedule, due, at)

    async def _when_idle(self, schedule: Schedule, due: datetime, at: int, room: ThreadRef) -> None:
        try:
            await self._wait_for_room(schedule, due, at, room)
        except Exception:  # a waiting run's failure never stops the scheduler or the bridge
            log.exception("schedule %s failed while waiting for %s", schedule.key, room.key)

    async def _wait_for_room(
        self, schedule: Schedule, due: datetime, at: int, room: ThreadRef
    ) -> None:
        limit = max(schedule.catch_up, GRACE)
        while await self.store.thread_busy(room.key):
            if (self.clock.now() - due).total_seconds() > limit:
                note = "the room stayed busy past its catch-up"
                await self.store.settle(schedule.key, at, RunState.SKIPPED, note)
                await self._tell(schedule, texts.refused_text(schedule, due, note))
                await self._audit(schedule, None, due, "skipped", reason=note)
                return
            await anyio.sleep(BUSY_POLL)
        await self._make(schedule, due, at)

    async def _make(self, schedule: Schedule, due: datetime, at: int) -> None:
        author = self._author(schedule)
        event_id = f"schedule-{schedule.key}-{at}"
        try:
            thread = await self._start(schedule, author, event_id)
        except Exception as exc:  # a chat that failed: the run is marked failed
            log.warning("schedule %s could not start: %s", schedule.key, exc)
            await self.store.settle(schedule.key, at, RunState.FAILED, str(exc))
            return
        await self.store.settle(
            schedule.key, at, RunState.STARTED, "", thread.key, f"{thread.platform}:{event_id}"
        )
        await self._audit(schedule, thread, due, "started")

    async def _start(self, schedule: Schedule, author: Author, event_id: str) -> ThreadRef:
        target = schedule.target
        if target is not None and await self.store.thread_busy(target.key):
            # Documented choice: a run never joins a turn that is running (it would be handed
            # to that person's turn mid-way); it opens a new thread and says so here.
            await self.core.say(target, texts.moved_text(schedule))
            target = None
        if target is None:
            return await self.core.start_thread(
                schedule.place,
                schedule.prompt,
                author,
                model=schedule.model,
                event_id=event_id,
                workspace=schedule.workspace,
            )
        await self.core.say(target, f"**{author.label}** asks:\n\n{schedule.prompt}")
        await self.core.submit(
            IncomingMessage(
                thread=target,
                event_id=event_id,
                message_id=event_id,
                author=author,
                text=schedule.prompt,
            )
        )
        return target

    def _author(self, schedule: Schedule) -> Author:
        if schedule.author is None:
            return Author.schedule(schedule.id)  # the operator's: it runs as the bridge
        person = schedule.author
        # The person's id (their access and budget), named as their schedule in the thread.
        return person.model_copy(
            update={"display_name": f"{person.display_name or person.id} (schedule {schedule.id})"}
        )

    async def _refusal(self, schedule: Schedule, due: datetime) -> str:
        """Why a chat schedule's author may not run it now ("" when they may)."""
        person = schedule.author
        if person is None:
            return ""  # the operator's schedule: no user access check
        if not allowed(self.core.config, schedule.platform, schedule.channel, person.id):
            return f"{person.label} is no longer allowed to use the agent here"
        team = self.core.team
        if team is not None and team.budgets.enabled:
            where = ThreadRef(platform=schedule.platform, channel=schedule.channel)
            # Periods as the turn policy counts them (the wall clock of the usage rows).
            standings = await team.budgets.check(person, where)
            over = [s for s in standings if s.over]
            if over:
                return f"{person.label} is over the budget `{over[0].budget.label}`"
        return ""

    async def _tell(self, schedule: Schedule, text: str) -> None:
        """A note in the schedule's thread, or as a new message in its channel."""
        try:
            if schedule.target is not None:
                await self.core.say(schedule.target, text)
                return
            chat = self.core.adapters.get(schedule.platform)
            if isinstance(chat, OpensThreads):
                await chat.open_thread(schedule.channel, text)
        except Exception:
            log.warning("schedule %s: the note could not be posted", schedule.key, exc_info=True)

    async def _audit(
        self, schedule: Schedule, thread: ThreadRef | None, due: datetime, outcome: str, **more: str
    ) -> None:
        team = self.core.team
        if team is None:
            return
        await team.audit.append(
            "schedule_run",
            thread=thread,
            person=self._author(schedule),
            schedule=schedule.id,
            due=due.isoformat(),
            outcome=outcome,
            place=schedule.channel,
            **more,
        )


def allowed(config: Config, platform: str, channel: str, user: str) -> bool:
    """The access lists' rule (docs: the security model) for a schedule's author: the user is
    listed (or none is) and the channel or room is listed (or none is); both empty: nobody.
    Platforms without access lists (the console) serve their one user."""
    if platform == "slack":
        users, places = config.slack.allowed_users, config.slack.allowed_channels
    elif platform == "matrix":
        users, places = config.matrix.allowed_users, config.matrix.allowed_rooms
    else:
        return True
    if not users and not places:
        return False
    return (not users or user in users) and (not places or channel in places)
