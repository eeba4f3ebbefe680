"""The console's HTML: Jinja2 templates shipped in the package, autoescaped, and every value
shown passed through the bridge's secret scrubber first (Jinja's ``finalize``; the threads
table's rows in :mod:`bridge.web.rows`, the same way, each distinct value once)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.responses import HTMLResponse

from bridge.core.scrub import Scrubber
from bridge.web.reads import ThreadLine
from bridge.web.rows import Shown, ago, thread_rows, when


class Pages:
    def __init__(self, scrub: Scrubber) -> None:
        self._scrub = scrub
        self._shown = Shown(scrub)
        self.env = Environment(
            loader=PackageLoader("bridge.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            finalize=self._finalize,
            trim_blocks=True,
            lstrip_blocks=True,
            # Compiled once: the templates ship in the package and do not change while it runs.
            auto_reload=False,
        )
        self.env.filters["when"] = when
        self.env.filters["ago"] = ago

    def _finalize(self, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, Markup):  # our own SVG charts: built from escaped text
            return value
        return self._shown.text(value)

    def scrub(self, text: str) -> str:
        return self._scrub(text)

    def thread_rows(self, lines: Sequence[ThreadLine], currency: str) -> list[Markup]:
        """The threads table's rows, scrubbed and escaped (:mod:`bridge.web.rows`)."""
        return thread_rows(lines, currency, self._shown.fresh())

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        self._shown.fresh()
        return HTMLResponse(self.env.get_template(name).render(**context), status_code=status)
