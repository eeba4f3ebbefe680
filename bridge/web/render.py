"""The console's HTML: Jinja2 templates shipped in the package, autoescaped, and every value
shown passed through the bridge's secret scrubber first (Jinja's ``finalize``)."""

from __future__ import annotations

import time
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.responses import HTMLResponse

from bridge.core.scrub import Scrubber


def _when(at: float | None) -> str:
    if not at:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _ago(at: float | None) -> str:
    if not at:
        return "—"
    seconds = max(0, int(time.time() - at))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


class Pages:
    def __init__(self, scrub: Scrubber) -> None:
        self._scrub = scrub
        self.env = Environment(
            loader=PackageLoader("bridge.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            finalize=self._finalize,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["when"] = _when
        self.env.filters["ago"] = _ago

    def _finalize(self, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, Markup):  # our own SVG charts: built from escaped text
            return value
        return self._scrub(value if isinstance(value, str) else str(value))

    def scrub(self, text: str) -> str:
        return self._scrub(text)

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(name).render(**context), status_code=status)
