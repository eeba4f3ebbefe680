"""The console's Starlette application: its routes, what each needs, and the security headers
on every answer."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from bridge.core.approvals.secrets import scrubber_for
from bridge.core.events import Author
from bridge.core.signin import WebSessions
from bridge.web import actions, live, pages, reports
from bridge.web.access import Access
from bridge.web.context import Console
from bridge.web.core import ConsoleCore
from bridge.web.guard import Guard, SecurityHeaders
from bridge.web.render import Pages

STATIC = Path(__file__).parent / "static"


def console_app(core: ConsoleCore) -> Starlette:
    config = core.config
    web = config.web
    sessions = WebSessions(core.store.database, web.link_seconds, web.session_hours * 3600)
    access = Access(config, core.members, core.store.database)

    async def audit_signin(person: Author, platform: str) -> None:
        if core.team is not None:
            await core.team.audit.append(
                "console_signin", person=person, platform=platform, via="trusted header"
            )

    console = Console(
        core=core,
        guard=Guard(web, sessions, access, audit_signin),
        access=access,
        pages=Pages(scrubber_for(config)),
    )
    routes = [
        Route("/", pages.threads),
        Route("/thread", pages.thread),
        Route("/thread/events", live.events),
        Route("/thread/decide", actions.decide, methods=["POST"]),
        Route("/thread/stop", actions.stop, methods=["POST"]),
        Route("/approvals", pages.approvals),
        Route("/usage", reports.usage),
        Route("/audit", reports.audit),
        Route("/schedules", reports.schedules),
        Route("/instances", reports.instances),
        Route("/signin/{link}", actions.signin_page),
        Route("/signin/{link}", actions.signin, methods=["POST"]),
        Route("/signout", actions.signout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(SecurityHeaders)])
    app.state.console = console
    return app
