"""What a person does from the console: sign in with a `!web` link (the GET only shows a
button; the POST uses the link), sign out, approve / always / deny a waiting request (the same
decision path as a click in the chat), stop a turn (the same command as `!stop`)."""

from __future__ import annotations

import logging
import uuid
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from bridge.core.events import ApprovalChoice, DecideOutcome, IncomingMessage
from bridge.core.store.rows import ApprovalState
from bridge.web.context import console_of
from bridge.web.guard import COOKIE
from bridge.web.pages import refused, seen_thread, signed_in

log = logging.getLogger(__name__)

_CHOICES = {choice.value: choice for choice in ApprovalChoice}
FORGED = "Refused: this form did not come from your console page (sign in again and retry)."
NOT_YOURS = "Refused: you may not act in that thread."


async def signin_page(request: Request) -> Response:
    """The button only: a link preview's GET signs nobody in and uses nothing."""
    console = console_of(request)
    link = request.path_params["link"]
    if not await console.guard.sessions.link_usable(link):
        return refused(
            request,
            "This sign-in link is used, expired or not valid: send `!web` "
            "to the bot in a DM for a new one.",
            410,
        )
    return console.pages.page("signin.html", viewer=None, link=link)


async def signin(request: Request) -> Response:
    console = console_of(request)
    guard = console.guard
    if await guard.form(request, None) is None:
        return refused(request, FORGED)
    used = await guard.sessions.use_link(request.path_params["link"])
    if used is None:
        return refused(
            request,
            "This sign-in link is used, expired or not valid: send `!web` "
            "to the bot in a DM for a new one.",
            410,
        )
    author, platform = used
    if console.access.viewer(author, platform) is None:
        return refused(request, "Your chat account is not served by this bridge.")
    session_id = await guard.sessions.open(author, platform)
    log.info("console: %s signed in", author.id)
    if console.core.team is not None:
        await console.core.team.audit.append("console_signin", person=author, platform=platform)
    response = RedirectResponse("/", status_code=303)
    guard.set_cookie(response, session_id)
    return response


async def signout(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    console = console_of(request)
    if await console.guard.form(request, visit) is None:
        return refused(request, FORGED)
    await console.guard.sessions.close(request.cookies.get(COOKIE, ""))
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


def _back(key: str) -> Response:
    return RedirectResponse(f"/thread?t={quote(key, safe='')}", status_code=303)


async def decide(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    console = console_of(request)
    form = await console.guard.form(request, visit)
    if form is None:
        return refused(request, FORGED)
    key, request_id = str(form.get("t", "")), str(form.get("approval", ""))
    choice = _CHOICES.get(str(form.get("choice", "")))
    line = await seen_thread(request, visit, key)
    if line is None or choice is None:
        return refused(request, NOT_YOURS)
    if not await console.access.may_act(visit.viewer, line.thread):
        return refused(request, NOT_YOURS)
    row = await console.core.store.approval(request_id)
    # The request must be this thread's: a form naming another thread's request is refused.
    if row is None or row.thread_key != line.key:
        return refused(request, NOT_YOURS)
    if row.state is not ApprovalState.WAITING or row.handle is None:
        return refused(request, "That request does not wait any more.", 409)
    outcome = await console.core.decide(line.thread, row.handle, choice, visit.viewer.author)
    if outcome is DecideOutcome.NOT_APPROVER:
        return refused(request, NOT_YOURS)
    if outcome is DecideOutcome.UNKNOWN:
        return refused(request, "That request does not wait any more.", 409)
    return _back(line.key)


async def stop(request: Request) -> Response:
    """``!stop`` in the thread, by this person: the chat's own command, routed to whichever
    instance runs the thread."""
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    console = console_of(request)
    form = await console.guard.form(request, visit)
    if form is None:
        return refused(request, FORGED)
    line = await seen_thread(request, visit, str(form.get("t", "")))
    if line is None or not await console.access.may_act(visit.viewer, line.thread):
        return refused(request, NOT_YOURS)
    event = f"web:{uuid.uuid4().hex}"
    await console.core.submit(
        IncomingMessage(
            thread=line.thread,
            event_id=event,
            message_id=event,
            author=visit.viewer.author,
            text="!stop",
        )
    )
    return _back(line.key)
