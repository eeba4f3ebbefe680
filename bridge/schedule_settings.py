"""``[[schedules]]``: prompts the operator schedules (docs/schedules.md).

Apart from :mod:`bridge.config` so that the configuration stays one file an operator reads.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bridge.cron_times import BadCron, check, duration


class ScheduleSection(BaseModel):
    """One ``[[schedules]]`` entry: it runs as the bridge, in a channel or room it serves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64)
    cron: str
    # An IANA zone; empty: [bridge] timezone.
    timezone: str = ""
    # A Slack channel id, or a Matrix room id (exactly one of the two).
    channel: str = ""
    room: str = ""
    # The chat: from `channel` (Slack) or `room` (Matrix) unless named ("console": the
    # terminal chat of `make run`, whose channel is "console").
    chat: str = ""
    # "new": each run opens a new thread (a room's timeline where Matrix has no threads);
    # anything else: the thread (Slack ts, Matrix root event id) every run is posted in.
    thread: str = "new"
    prompt: str = Field(min_length=1)
    model: str | None = None
    # The path of a [[workspaces]] entry the run's new thread works in (its worktree, notes
    # and sandbox settings), instead of the channel's.
    workspace: str | None = None
    # How late a missed run (the bridge was down, the host asleep) may still be made.
    catch_up: float = 3600.0

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"schedule name `{name}`: letters, digits, - and _ only")
        return name

    @field_validator("catch_up", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        if not isinstance(value, (str, int, float)):
            raise ValueError("a duration: seconds, or a text like `1h` or `30m`")
        return duration(value)

    @model_validator(mode="after")
    def _place_and_cron(self) -> ScheduleSection:
        if bool(self.channel) == bool(self.room):
            raise ValueError(f"schedule `{self.name}` needs exactly one of `channel` or `room`")
        try:
            check(self.cron, self.timezone or "UTC")
        except BadCron as exc:
            raise ValueError(f"schedule `{self.name}`: {exc}") from None
        return self

    @property
    def platform(self) -> str:
        return self.chat or ("slack" if self.channel else "matrix")

    @property
    def place(self) -> str:
        return self.channel or self.room
