"""The threads page's rows, built in Python rather than by Jinja cell by cell.

With 200 threads the page showed about 2,000 values; through the template each cost a
``finalize`` call, an attribute lookup and a filter or two (about 80 µs a row). Here each value
is scrubbed (:meth:`Shown.text`: the bridge's scrubber, asked once per distinct value) and
HTML-escaped, then placed in the row's markup, which is the markup the template had. Every
value shown passes through both, as the template's ``finalize`` and autoescape did. Answers and
whole rows are kept from page to page until the scrubber's secrets change (:meth:`Shown.fresh`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from jinja2.utils import url_quote
from markupsafe import Markup

from bridge.core.scrub import Scrubber
from bridge.web.reads import ThreadLine

# One row of the threads table; every field is scrubbed and escaped before it is put in.
_ROW = (
    '<tr class="state-{state}">\n'
    '  <td><a href="/thread?t={href}">{title}</a></td>\n'
    "  <td>{platform}</td>\n"
    "  <td>{channel}</td>\n"
    '  <td class="state">{state}</td>\n'
    "  <td>{model}</td>\n"
    "  <td>{queued}</td>\n"
    '  <td title="{when}">{ago}</td>\n'
    "  <td>{tokens}{cost}</td>\n"
    "  <td>{instance}</td>\n"
    "</tr>"
)
_COST = " ({cost} {currency})"


def when(at: float | None) -> str:
    if not at:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def ago(at: float | None, now: float | None = None) -> str:
    if not at:
        return "—"
    seconds = max(0, int((time.time() if now is None else now) - at))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


# Values and rows kept at most (bounds on memory, not policies: past either, all are forgotten):
# rows go stale as their "… ago" moves, so a few pages of 500 threads, about 1 MB.
SHOWN_LIMIT = 20_000
ROWS_LIMIT = 2_000


def escape_html(text: str) -> str:
    """Exactly markupsafe's escaping (what Jinja's autoescape does), as a plain string."""
    return (
        text.replace("&", "&amp;")
        .replace(">", "&gt;")
        .replace("<", "&lt;")
        .replace("'", "&#39;")
        .replace('"', "&#34;")
    )


class Shown:
    """Values as the pages show them: scrubbed, then escaped, each distinct value once.

    The scrubber's answer depends on the value and on the scrubber's secrets alone, so it is
    kept, and forgotten whenever the secrets change (:meth:`fresh`, at the start of each page:
    ``Scrubber.secrets`` is a new list each time they change, e.g. a login file read again).
    """

    def __init__(self, scrub: Scrubber) -> None:
        self._scrub = scrub
        self._for: object = None
        self._scrubbed: dict[str, str] = {}
        self._escaped: dict[str, str] = {}
        # Whole rows made of such values, by what they were made from.
        self.rows: dict[tuple[object, ...], Markup] = {}

    def fresh(self) -> Shown:
        """At the start of a page: forget every answer if the secrets changed since."""
        secrets = self._scrub.secrets
        kept = len(self._scrubbed) + len(self._escaped)
        if secrets is not self._for or kept > SHOWN_LIMIT or len(self.rows) > ROWS_LIMIT:
            self._scrubbed.clear()
            self._escaped.clear()
            self.rows.clear()
            self._for = secrets
        return self

    def text(self, value: object) -> str:
        """Scrubbed (for Jinja's ``finalize``, which escapes after)."""
        text = value if isinstance(value, str) else str(value)
        done = self._scrubbed.get(text)
        if done is None:
            done = self._scrubbed[text] = self._scrub(text)
        return done

    def __call__(self, value: object) -> str:
        """Scrubbed and escaped, ready to put in markup."""
        text = value if isinstance(value, str) else str(value)
        done = self._escaped.get(text)
        if done is None:
            done = self._escaped[text] = escape_html(self.text(text))
        return done


def thread_rows(lines: Sequence[ThreadLine], currency: str, shown: Shown) -> list[Markup]:
    """The table's rows for ``lines``, each the markup the template would have made (the
    template's row before, byte for byte). A row already made from the same line, the same
    "… ago" and currency (and the same secrets: see :meth:`Shown.fresh`) is made once."""
    now = time.time()
    rows = []
    for line in lines:
        since = ago(line.last_at, now)
        # Every field the row shows (the key names platform, channel and thread).
        key: tuple[object, ...] = (line.key, line.title, line.state, line.model, line.queued)
        key += (line.last_at, line.tokens, line.cost, line.instance, since, currency)
        row = shown.rows.get(key)
        if row is None:
            row = shown.rows[key] = _row(line, since, currency, shown)
        rows.append(row)
    return rows


def _row(line: ThreadLine, since: str, currency: str, shown: Shown) -> Markup:
    cost = ""
    if line.cost:
        cost = _COST.format(cost=shown(f"{line.cost:.2f}"), currency=shown(currency))
    return Markup(
        _ROW.format(
            state=shown(line.state),
            href=shown(url_quote(line.key)),
            title=shown(line.title or line.thread.thread or "(room)"),
            platform=shown(line.thread.platform),
            channel=shown(line.thread.channel),
            model=shown(line.model),
            queued=shown(line.queued),
            when=shown(when(line.last_at)),
            ago=shown(since),
            tokens=shown(f"{line.tokens:,}"),
            cost=cost,
            instance=shown(line.instance or "—"),
        )
    )
