"""The threads pages: every thread a person may see, one thread live, approvals waiting."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bridge.core.events import ThreadRef
from bridge.web.context import console_of
from bridge.web.guard import Visit
from bridge.web.reads import ThreadLine, thread_detail, thread_lines


async def signed_in(request: Request) -> Visit | Response:
    """The visit, or the page that says how to sign in."""
    console = console_of(request)
    visit = await console.guard.visit(request)
    if visit is None:
        return console.pages.page("signed_out.html", status=401, viewer=None)
    return visit


def show(request: Request, visit: Visit, name: str, **context: Any) -> Response:
    console = console_of(request)
    response = console.pages.page(
        name,
        viewer=visit.viewer,
        csrf=visit.session.csrf,
        web=console.core.config.web,
        **context,
    )
    if visit.new_session is not None:
        console.guard.set_cookie(response, visit.new_session)
    return response


def refused(request: Request, text: str, status: int = 403) -> Response:
    console = console_of(request)
    return console.pages.page("message.html", status=status, viewer=None, text=text)


async def visible_lines(request: Request, visit: Visit) -> list[ThreadLine]:
    console = console_of(request)
    access = console.access
    return [
        line
        for line in await thread_lines(console.core)
        if await access.sees(visit.viewer, line.thread)
    ]


async def seen_thread(request: Request, visit: Visit, key: str) -> ThreadLine | None:
    """The thread keyed ``key`` when it exists and the person sees it (else None: the pages
    say "no such thread" alike, so a person cannot probe for others' threads)."""
    console = console_of(request)
    try:
        ref = ThreadRef.from_key(key)
    except ValueError:
        return None
    if not await console.access.sees(visit.viewer, ref):
        return None
    lines = await thread_lines(console.core, only=ref.key)
    return lines[0] if lines else None


async def threads(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    lines = await visible_lines(request, visit)
    console = console_of(request)
    rows = console.pages.thread_rows(lines, console.core.config.pricing.currency)
    return show(request, visit, "threads.html", rows=rows)


async def thread(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    line = await seen_thread(request, visit, request.query_params.get("t", ""))
    if line is None:
        return refused(request, "No such thread, or not one of yours.", 404)
    console = console_of(request)
    detail = await thread_detail(console.core, line)
    may_act = await console.access.may_act(visit.viewer, line.thread)
    here = console.core.leases.name
    return show(request, visit, "thread.html", d=detail, may_act=may_act, here=here)


async def approvals(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    console = console_of(request)
    rows = []
    for row in await console.core.store.waiting_approvals():
        ref = ThreadRef.from_key(row.thread_key)
        if await console.access.sees(visit.viewer, ref):
            rows.append((row, ref, await console.access.may_act(visit.viewer, ref)))
    return show(request, visit, "approvals.html", rows=rows)
