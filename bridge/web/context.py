"""What every route of the console reaches through its request: the core, the guard, the
access rules and the templates."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from bridge.web.access import Access
from bridge.web.core import ConsoleCore
from bridge.web.guard import Guard
from bridge.web.render import Pages


@dataclass
class Console:
    core: ConsoleCore
    guard: Guard
    access: Access
    pages: Pages


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console
