"""The threads pages: every thread a person may see, one thread live, approvals waiting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bridge.core.events import ThreadRef
from bridge.web.context import console_of
from bridge.web.guard import Visit
from bridge.web.reads import PAGE_SIZE, ThreadLine, thread_detail, thread_lines, thread_order


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


@dataclass(frozen=True)
class ThreadsPage:
    lines: list[ThreadLine]
    number: int  # from 1
    first: int  # the position of its first line among those the person sees, from 1
    total: int  # threads the person sees

    @property
    def older(self) -> int | None:
        return self.number + 1 if self.first - 1 + len(self.lines) < self.total else None

    @property
    def newer(self) -> int | None:
        return self.number - 1 if self.number > 1 else None


def page_number(request: Request) -> int:
    try:
        return max(1, int(request.query_params.get("page", "1")))
    except ValueError:
        return 1


async def visible_page(request: Request, visit: Visit, number: int) -> ThreadsPage:
    """Page ``number`` of the threads the person sees, newest activity first: the order and who
    sees what are settled on every thread first (one cheap query, membership answers cached),
    then only the page's threads are read in full."""
    console = console_of(request)
    seen = await console.access.seen_keys(visit.viewer, await thread_order(console.core))
    last = max(1, -(-len(seen) // PAGE_SIZE))
    number = min(number, last)
    start = (number - 1) * PAGE_SIZE
    lines = await thread_lines(console.core, seen[start : start + PAGE_SIZE])
    return ThreadsPage(lines, number, start + 1, len(seen))


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
    lines = await thread_lines(console.core, [ref.key])
    return lines[0] if lines else None


async def threads(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    page = await visible_page(request, visit, page_number(request))
    console = console_of(request)
    rows = console.pages.thread_rows(page.lines, console.core.config.pricing.currency)
    return show(request, visit, "threads.html", rows=rows, page=page)


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
