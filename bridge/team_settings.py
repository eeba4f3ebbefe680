"""The team controls' configuration: ``[pricing]`` and ``[[budgets]]`` (docs/team-controls.md).

Apart from :mod:`bridge.config` so that the usage and budget modules can import their settings
without the rest of the configuration, and the configuration stays one file an operator reads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelPrice(_Section):
    """What a model costs per million tokens; thinking is inside output, as agy counts it."""

    input: float = Field(default=0.0, ge=0)
    output: float = Field(default=0.0, ge=0)
    cache_read: float = Field(default=0.0, ge=0)


class PricingSection(_Section):
    """Optional prices: with them, usage and budgets carry a cost beside the tokens."""

    currency: str = "USD"
    # Keyed by the model's id as the bridge names it (`!model`, `[agy] model`, "default").
    models: dict[str, ModelPrice] = Field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.models)


class BudgetSection(_Section):
    """One ``[[budgets]]`` entry: a limit on tokens and/or cost per calendar period."""

    name: str = ""
    # user: each person has their own; channel: each channel or room has its own; all: one.
    scope: Literal["user", "channel", "all"]
    period: Literal["day", "week", "month"] = "month"
    # Narrow the budget to these people and/or these channels or rooms (ids); empty: any.
    users: list[str] = Field(default_factory=list)
    channels: list[str] = Field(default_factory=list)
    limit_tokens: int | None = Field(default=None, gt=0)
    limit_cost: float | None = Field(default=None, gt=0)
    warn_at: float = Field(default=0.8, gt=0, le=1)

    @model_validator(mode="after")
    def _a_limit(self) -> BudgetSection:
        if self.limit_tokens is None and self.limit_cost is None:
            raise ValueError("a budget needs limit_tokens and/or limit_cost")
        if self.name and not self.name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"budget name `{self.name}`: letters, digits, - and _ only")
        return self

    @property
    def label(self) -> str:
        """Its name, or one made of its scope and period ("user-day")."""
        return self.name or f"{self.scope}-{self.period}"
