"""A schedule as the scheduler sees it, wherever it was defined."""

from __future__ import annotations

from dataclasses import dataclass

from bridge.config import Config
from bridge.core.events import Author, ChannelRef, ThreadRef
from bridge.schedule_settings import ScheduleSection

CONFIG_PREFIX = "config:"
CHAT_PREFIX = "chat:"
# Beyond catch_up, a run is never later than this: a tick that comes a little after the
# scheduled time (the loop's own delay) still makes it.
GRACE = 60.0


@dataclass(frozen=True)
class Schedule:
    key: str  # "config:<name>" or "chat:<id>"
    platform: str
    channel: str
    thread: str  # "" (each run opens a new thread) or the thread every run is posted in
    cron: str
    timezone: str
    prompt: str
    # None: the operator's (it runs as the bridge); else the person who added it in the chat.
    author: Author | None
    model: str | None = None
    catch_up: float = 3600.0
    # The [[workspaces]] path its new threads work in (the operator's only).
    workspace: str | None = None

    @property
    def id(self) -> str:
        """What people type: the config name, or the chat schedule's short id."""
        return self.key.split(":", 1)[1]

    @property
    def place(self) -> ChannelRef:
        return ChannelRef(platform=self.platform, channel=self.channel)

    @property
    def target(self) -> ThreadRef | None:
        if not self.thread:
            return None
        return ThreadRef(platform=self.platform, channel=self.channel, thread=self.thread)

    @property
    def from_config(self) -> bool:
        return self.author is None

    @property
    def label(self) -> str:
        return f"schedule {self.id}"


def from_section(section: ScheduleSection, config: Config) -> Schedule:
    return Schedule(
        key=CONFIG_PREFIX + section.name,
        platform=section.platform,
        channel=section.place,
        thread="" if section.thread == "new" else section.thread,
        cron=section.cron,
        timezone=section.timezone or config.bridge.timezone,
        prompt=section.prompt,
        author=None,
        model=section.model,
        catch_up=section.catch_up,
        workspace=section.workspace,
    )


def configured(config: Config) -> list[Schedule]:
    return [from_section(section, config) for section in config.schedules]
