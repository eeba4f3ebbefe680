"""The words of a request and of its decision, the same in every chat."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime

from bridge.core.events import Author
from bridge.core.store.rows import ApprovalState


def visible(text: str) -> str:
    """``text`` with control and format characters (a carriage return, an escape sequence, a
    right-to-left override, a zero-width space) written as escapes, so a command cannot hide,
    overwrite or reorder itself where it is shown; line breaks and tabs kept."""
    return "".join(
        ch
        if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp")
        else ascii(ch)[1:-1]
        for ch in text
    )


def inert(text: str) -> str:
    """Words from users (a display name, a deny reason) as the bridge's Markdown shows them:
    on one line, invisible characters made visible, and making no link. A zero-width space
    goes between ``]`` and ``(`` or ``[`` and after ``<``: ``[Alice](https://…)`` and
    ``<https://…>`` show as typed, in Matrix's HTML as in Slack."""
    flat = " ".join(visible(text).split())
    return flat.replace("](", "]\u200b(").replace("][", "]\u200b[").replace("<", "<\u200b")


def _fence(text: str) -> str:
    # A fence longer than any run of backticks inside, so the command cannot end it early.
    ticks = "`" * max(3, _longest_backticks(text) + 1)
    return f"{ticks}\n{text}\n{ticks}"


def _longest_backticks(text: str) -> int:
    best = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        best = max(best, run)
    return best


def _code(text: str) -> str:
    # An inline code span the text cannot end early (a backtick shows as a quote: Slack's
    # mrkdwn, where approval requests are shown, has no longer spans).
    return "`" + text.replace("`", "'").replace("\n", " ") + "`"


# A command longer than this (once blank runs are folded) is not shown in the request: the
# request says so and the full text is attached as a file (:func:`too_long`). Below it, one
# request message holds it whole (Slack: a few 3,000-character sections; Matrix: one event).
SHOWN_CHARS = 8000
FOLD_MARK = "⏎"
# Three or more line breaks in a row (blank lines, maybe holding blanks): shown as one line.
_BLANK_RUN = re.compile(r"\n(?:[ \t]*\n){2,}")


def folded(text: str) -> str:
    """``text`` with every run of blank lines folded into one visible line (``⏎ ×2300``),
    so that nothing after them can be pushed out of sight. A ``⏎`` of the text itself is
    written as an escape, so the text cannot fake a fold."""
    text = text.replace(FOLD_MARK, "\\u23ce")
    # The number is the line breaks folded: `a` + 2,300 line breaks + `b` shows `⏎ ×2300`.
    return _BLANK_RUN.sub(lambda m: f"\n{FOLD_MARK} ×{m.group().count(chr(10))}\n", text)


def too_long(summary: str) -> bool:
    return len(folded(visible(summary))) > SHOWN_CHARS


def shown(summary: str) -> str:
    """The command in a code block, exactly as it will run: every line (runs of blank lines
    folded visibly), its invisible characters made visible. One too long for a message is
    not shown cut: the request says so, and the gate attaches the whole text."""
    text = folded(visible(summary))
    if len(text) <= SHOWN_CHARS:
        return _fence(text)
    lines = summary.count("\n") + 1
    return (
        f"⚠️ This is too long to show here ({len(summary):,} characters, {lines:,} lines): the "
        "whole text is attached as a file. Read all of it before you approve; it cannot be "
        "allowed always."
    )


def minutes(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:g} seconds"
    value = seconds / 60
    return f"{value:g} minute" + ("" if value == 1 else "s")


def request_text(
    *,
    tool: str,
    summary: str,
    preview: str,
    requested_by: Author | None,
    timeout: float,
    number: int | None = None,
) -> str:
    who = f" for {inert(requested_by.label)}" if requested_by else ""
    what = "run this command" if tool == "run_command" else f"use {_code(tool)}"
    name = f" (request {number})" if number is not None else ""
    lines = [f"🔐 **Approval needed**{name}: the agent wants to {what}{who}:", shown(summary)]
    if preview:
        lines.append(_fence(folded(visible(preview))))
    lines += [f"⚠️ {warning}" for warning in look_alikes(summary)]
    n = f" {number}" if number is not None else ""
    lines.append(
        f"It waits {minutes(timeout)}, then it is denied. "
        f"Reply `approve{n}`, or `deny{n}: <reason>` to deny and tell the agent why."
    )
    return "\n".join(lines)


_URL_HOST = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^/\s@'\"]*@)?([^/\s:'\"?#]+)")
_WORD = re.compile(r"[^\s'\"`=/:@,;()<>|&]+")


def look_alikes(text: str) -> list[str]:
    """Warnings about what may not be what it seems: a URL's host that is not plain ASCII
    (shown in punycode, the name the network uses), and words that mix letters of several
    scripts (`gіthub.com` with a Cyrillic `і`)."""
    found: list[str] = []
    for host in dict.fromkeys(_URL_HOST.findall(text)):
        if not host.isascii():
            found.append(
                f"the host {_code(visible(host))} is not plain ASCII: it is "
                f"{_code(_punycode(host))} on the network, not the name it looks like"
            )
    for word in dict.fromkeys(_WORD.findall(text)):
        scripts = _scripts(word)
        if len(scripts) > 1:
            found.append(
                f"{_code(visible(word))} mixes letters of several scripts "
                f"({', '.join(sorted(scripts))}): it may imitate another word"
            )
    return found


def _punycode(host: str) -> str:
    labels = []
    for label in host.split("."):
        try:
            labels.append(label.encode("idna").decode("ascii"))
        except UnicodeError:
            labels.append("xn--" + label.encode("punycode").decode("ascii"))
    return ".".join(labels)


def _scripts(word: str) -> set[str]:
    found = set()
    for ch in word:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            found.add(name.split(" ")[0].title() if name else "Unknown")
    return found


TOO_SOON = (
    "a request of this thread was posted or decided just before it, so it could mean another one"
)


def which_waits(by: Author, why: str, number: int | None, summary: str) -> str:
    """A typed answer that decided nothing: why, which request waits, how to answer it."""
    n = f" {number}" if number is not None else ""
    name = f"Request{n}" if number is not None else "A request"
    return (
        f"{inert(by.label)}: your answer decided nothing ({why}). {name} waits: "
        f"{_code(summary[:200])}. To answer it, reply `approve{n}` or `deny{n}: <reason>`."
    )


_VERBS = {
    ApprovalState.APPROVED: "✅ Approved",
    ApprovalState.ALWAYS: "♾️ Approved always in this thread",
    ApprovalState.DENIED: "❌ Denied",
    ApprovalState.TIMED_OUT: "⏱️ Denied: no one answered in time",
    ApprovalState.STOPPED: "🛑 Denied: the turn was stopped",
    ApprovalState.EXPIRED: "⌛ Expired",
}


def result_text(
    summary: str,
    state: ApprovalState,
    by: Author | None,
    reason: str,
    at: datetime | None = None,
    *,
    pattern: str | None = None,
    number: int | None = None,
) -> str:
    """The request message once decided: what it was, who decided what, and when."""
    when = (at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    line = _VERBS[state]
    if by is not None:
        line += f" by {inert(by.label)}"
    line += f" at {when}"
    if pattern:
        line += f" ({_code(pattern)} now runs without asking here)"
    if reason:
        line += f": {inert(reason)}"
    name = f"Request {number}:\n" if number is not None else ""
    return f"{line}\n{name}{shown(summary)}"


def agent_reason(state: ApprovalState, by: Author | None, reason: str, timeout: float) -> str:
    """What the model reads after "Tool call denied by pre-tool hook: "."""
    name = by.display_name or by.id if by else ""
    if state is ApprovalState.DENIED:
        return f"denied by {name}" + (f": {reason}" if reason else "")
    if state is ApprovalState.TIMED_OUT:
        return f"no one in the chat approved it within {minutes(timeout)}"
    if state is ApprovalState.STOPPED:
        return f"the turn was stopped by {name}" if name else "the turn was stopped"
    return reason or "it was not approved"


def dropped_rules_text(told: list[str]) -> str:
    """The thread's stored "always" entries the gate no longer reads (old forms)."""
    lines = "\n".join(f"• {text}" for text in told)
    return (
        "These commands allowed always in this thread are no longer used (rules are "
        f"word lists now), so they ask again:\n{lines}\n"
        "`!approvals reset` clears the list."
    )


def queued_too_long(timeout: float) -> str:
    """What the model reads when a call waited behind earlier requests for its whole window."""
    return (
        f"it waited behind earlier approval requests for the whole approval window "
        f"({minutes(timeout)}), so no one was asked; make the call again if it is still needed"
    )


def not_approver_text(who: Author) -> str:
    return f"{who.label} may not answer approval requests in this thread; nothing changed."
