"""A console page read as a person sees it: its text, its links and its tables' cells.

A test that looks for a short string in a page's whole markup also searches the values of its
attributes, and every page carries a random one (the sign-out form's CSRF token): "t9" was
found in such a token once, and a member was "shown" a thread she may not see. What a page
shows, or links to, is read here instead, so an assertion names the element it is about.
"""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit


@dataclass
class Page:
    text: str  # every text node, one a line (no attribute's value)
    links: list[str]  # every <a>'s href, in order
    tables: dict[str, list[list[str]]]  # a table's id -> its rows' cells' text, head included

    def thread_keys(self) -> list[str]:
        """The threads this page links to (their ``/thread?t=`` keys), in order."""
        return [
            key
            for link in self.links
            if urlsplit(link).path == "/thread"
            for key in parse_qs(urlsplit(link).query).get("t", [])
        ]


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.links: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.table: str | None = None  # the id of the table being read (others are not read)
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a" and found.get("href"):
            self.links.append(str(found["href"]))
        elif tag == "table" and found.get("id"):
            self.table = str(found["id"])
            self.tables[self.table] = []
        elif tag == "tr" and self.table is not None:
            self.tables[self.table].append([])
        elif tag in ("td", "th") and self.table is not None:
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.table is not None and self.cell is not None:
            self.tables[self.table][-1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "table":
            self.table = None

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.texts.append(data.strip())
        if self.cell is not None:
            self.cell.append(data)


def read(html: str) -> Page:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    return Page(text="\n".join(reader.texts), links=reader.links, tables=reader.tables)
