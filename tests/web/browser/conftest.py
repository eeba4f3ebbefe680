"""The browser tests' fixtures: one headless Chromium per pytest worker, a clean tab per test,
and the page kept as artifacts when a test fails (tests/web/browser/chrome.py)."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from tests.web.browser.chrome import (
    Chrome,
    Page,
    open_chrome,
    require_chromium,
    save_failure_artifacts,
)

_CALL_REPORT = pytest.StashKey[pytest.TestReport]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_REPORT] = report
    return report


@pytest.fixture(scope="session")
def chrome() -> Iterator[Chrome]:
    """Started once per worker (about 0.35 s of CPU for the headless shell, 0.7 s of Selenium's
    import), and only by a worker that runs a browser test."""
    require_chromium()
    browser = open_chrome()
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def page(chrome: Chrome, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A clean tab for one test; on failure its screenshot, HTML and the URLs it opened are
    saved under test-artifacts/browser/ (named after the test)."""
    if not chrome.alive():
        chrome.restart()
    if not chrome.clean:
        chrome.reset()  # the last test's tear-down did not finish its reset
    chrome.clean = False
    tab = Page(chrome.driver)
    yield tab
    report = request.node.stash.get(_CALL_REPORT, None)
    if report is not None and report.failed:
        saved = save_failure_artifacts(chrome.driver, request.node.nodeid, tab.visited)
        print("browser artifacts:", *(str(path) for path in saved))
    chrome.reset()
