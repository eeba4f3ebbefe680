"""Debian's headless Chromium driven through its own chromedriver, and nothing downloaded.

Selenium is given both paths (``/usr/lib/chromium/chromium-headless-shell`` where Debian's
``chromium-headless-shell`` is installed, else ``/usr/bin/chromium``; ``/usr/bin/chromedriver``),
so its Selenium Manager (which would otherwise fetch a driver and a browser from the internet)
has no reason to run; while the browser starts it is replaced by a guard that fails the test if
it is called anyway, and ``SE_OFFLINE`` tells it not to fetch should some path reach it. Chromium's
own background traffic (component updates, safe browsing, metrics) is switched off by flags,
and whatever still leaves for the outside goes to a recording proxy on loopback
(:class:`OutsideRecorder`), so a test can show that nothing did. Loopback addresses (every
server the tests start) bypass the proxy.

``make test`` installs the packages where it may (root with apt-get); elsewhere the browser
tests are skipped with the reason, and under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from unittest import mock

import anyio
import anyio.to_thread
import pytest

# Selenium (about 0.7 s of CPU to import) is imported where a browser is driven, not when this
# module is: every xdist worker collects the browser tests, and few of them run one.
if TYPE_CHECKING:
    from selenium import webdriver
    from selenium.webdriver.remote.webelement import WebElement

# Debian's chromium-headless-shell when it is there: the same Blink and network stack as the
# full browser, without its window, toolbar and address bar, which the full browser builds
# and keeps up to date even when headless (a page load costs it about twice the CPU, its start
# three times, and it idles at a few per cent of a core: docs/testing.md). The full browser
# otherwise, made lighter by flags (`chrome_options`).
HEADLESS_SHELL = Path("/usr/lib/chromium/chromium-headless-shell")
FULL_CHROMIUM = Path("/usr/bin/chromium")


def _default_chromium() -> Path:
    return HEADLESS_SHELL if os.access(HEADLESS_SHELL, os.X_OK) else FULL_CHROMIUM


CHROMIUM = Path(os.environ.get("AGY_BRIDGE_CHROMIUM", "") or _default_chromium())
CHROMEDRIVER = Path(os.environ.get("AGY_BRIDGE_CHROMEDRIVER", "/usr/bin/chromedriver"))
# Where a failed browser test leaves its screenshot, page source and visited URLs (git-ignored;
# docs/testing.md names it).
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "browser"
# Generous: a 2-core machine shared by a parallel suite can be slow to paint.
WAIT_SECONDS = 20.0
# How ChromeDriver reports an element of a page that has been replaced, instead of a
# StaleElementReferenceException, when the read races the navigation.
STALE_NODE = "does not belong to the document"

T = TypeVar("T")


def chromium_problem() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        return (
            f"{' and '.join(missing)} not found: the console's browser tests did not run (run "
            "`make test` as root, which installs Debian's chromium, chromium-driver and "
            "chromium-headless-shell)"
        )
    return None


def require_chromium() -> None:
    """Skip (fail under CI=true, where `make test` installs it) when Chromium is missing."""
    problem = chromium_problem()
    if problem is None:
        return
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{problem} (CI must run the browser tests)", pytrace=False)
    pytest.skip(problem)


class SeleniumManagerCalled(AssertionError):
    """Selenium tried to look up (and perhaps download) a driver or a browser."""


@contextmanager
def selenium_manager_forbidden() -> Iterator[None]:
    def refuse(*args: Any, **kwargs: Any) -> dict[str, str]:
        raise SeleniumManagerCalled(
            f"Selenium Manager was asked for {args!r}: it would fetch from the internet; "
            "give Selenium the system's chromedriver and chromium paths"
        )

    from selenium.webdriver.common.selenium_manager import SeleniumManager

    with mock.patch.object(SeleniumManager, "binary_paths", refuse):
        yield


class OutsideRecorder:
    """A loopback HTTP proxy that answers nothing and remembers every request sent to it.

    Chromium is told to use it for everything but loopback: any request for the outside world
    (a download, an update check) ends here instead of on the network, and is listed. Chromium
    itself still tries a few Google hosts in the background (an on-demand component check, the
    account service) whatever the flags: those are refused here and never reach the network;
    what the pages under test fetch is checked apart (:meth:`Page.requests`)."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="outside-recorder", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with conn:
                conn.settimeout(5)
                try:
                    first = conn.recv(4096).split(b"\r\n", 1)[0].decode("latin-1")
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    first = "(no request line)"
                with self._lock:
                    self.requests.append(first)

    def seen(self) -> list[str]:
        with self._lock:
            return list(self.requests)

    def close(self) -> None:
        self._sock.close()


# Chromium's features that call Google on their own (the network clock, hints, translation,
# casting, the sign-in's account check); the flags above switch off the rest.
_QUIET_FEATURES = (
    "NetworkTimeServiceQuerying",
    "OptimizationHints",
    "OptimizationGuideModelDownloading",
    "Translate",
    "MediaRouter",
    "AutofillServerCommunication",
    "CertificateTransparencyComponentUpdater",
    "InterestFeedContentSuggestions",
    "PrivacySandboxSettings4",
)
# What the pages do not need, switched off for the CPU it costs; the pages render the same. The
# full browser's address-bar dropdowns (three WebUI pages it preloads in a hidden renderer that
# keeps running: 3 % of a core while the browser idles); the back-forward cache, which keeps
# the page a test left alive (its renderer, its event streams) after every navigation.
_LIGHTER_FEATURES = (
    "WebUIOmniboxPopup",
    "WebUIOmniboxFullPopup",
    "WebUIOmniboxAimPopup",
    "BackForwardCache",
)


def chrome_options(proxy_port: int) -> webdriver.ChromeOptions:
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root (CI) cannot use Chromium's own sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--metrics-recording-only",
        "--disable-extensions",
        "--disable-component-extensions-with-background-pages",
        "--disable-field-trial-config",
        "--no-service-autorun",
        "--no-pings",
        "--disable-breakpad",
        "--password-store=basic",
        "--disable-features=" + ",".join(_QUIET_FEATURES + _LIGHTER_FEATURES),
        f"--proxy-server=http://127.0.0.1:{proxy_port}",
    ):
        options.add_argument(argument)
    # The requests the pages make (not Chromium's own), read by Page.requests.
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return options


def start_chrome(proxy_port: int) -> webdriver.Chrome:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    with selenium_manager_forbidden():
        driver = webdriver.Chrome(
            options=chrome_options(proxy_port), service=Service(str(CHROMEDRIVER))
        )
    driver.set_page_load_timeout(WAIT_SECONDS * 2)
    return driver


def artifact_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180]


def save_failure_artifacts(
    driver: webdriver.Chrome, nodeid: str, visited: list[str], where: Path = ARTIFACTS
) -> list[Path]:
    """The page as the browser showed it when the test failed: a PNG, its HTML, the URLs."""
    where.mkdir(parents=True, exist_ok=True)
    stem = artifact_name(nodeid)
    saved: list[Path] = []
    png = where / f"{stem}.png"
    if driver.save_screenshot(str(png)):
        saved.append(png)
    html = where / f"{stem}.html"
    html.write_text(driver.page_source, encoding="utf-8")
    saved.append(html)
    urls = where / f"{stem}.urls.txt"
    urls.write_text("".join(f"{url}\n" for url in [*visited, driver.current_url]))
    saved.append(urls)
    return saved


@dataclass
class Chrome:
    """One browser for a pytest worker's session, reset between tests."""

    driver: webdriver.Chrome
    outside: OutsideRecorder
    # Reset since a test last used it (a reset is a navigation: tens of milliseconds of CPU, so
    # a test's tear-down resets and the next test's set-up only when that did not happen).
    clean: bool = False

    def reset(self) -> None:
        """What one test leaves must not reach the next: its page (and the page's open event
        streams), cookies for every site (cookies ignore ports, and every test serves
        127.0.0.1), JavaScript switched back on, the log of requests read."""
        self.clean = False
        self.driver.get("about:blank")
        self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        self.driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})
        self.driver.get_log("performance")  # Page.requests lists this test's requests only
        self.clean = True

    def alive(self) -> bool:
        from selenium.common.exceptions import WebDriverException

        try:
            self.driver.execute_cdp_cmd("Browser.getVersion", {})
        except WebDriverException:
            return False
        return True

    def restart(self) -> None:
        """A browser that crashed in one test is replaced, not left to fail every later one."""
        from selenium.common.exceptions import WebDriverException

        try:
            self.driver.quit()
        except WebDriverException:
            pass
        self.clean = False
        self.driver = start_chrome(self.outside.port)

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            self.outside.close()


def open_chrome() -> Chrome:
    outside = OutsideRecorder()
    try:
        return Chrome(start_chrome(outside.port), outside)
    except BaseException:
        outside.close()
        raise


@dataclass
class Page:
    """The browser as an async test sees it: every Selenium call runs in a worker thread, so
    the servers the test runs on its own event loop keep answering while the browser waits."""

    driver: webdriver.Chrome
    visited: list[str] = field(default_factory=list)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args)

    async def open(self, url: str) -> None:
        self.visited.append(url)
        await self.call(self.driver.get, url)

    async def javascript(self, enabled: bool) -> None:
        """Switch scripts off (or on) for the pages opened next in this tab."""
        await self.call(
            self.driver.execute_cdp_cmd,
            "Emulation.setScriptExecutionDisabled",
            {"value": not enabled},
        )

    async def wait_for(
        self, condition: Callable[[webdriver.Chrome], T], what: str, seconds: float = WAIT_SECONDS
    ) -> T:
        from selenium.common.exceptions import (
            StaleElementReferenceException,
            TimeoutException,
            WebDriverException,
        )
        from selenium.webdriver.support.ui import WebDriverWait

        def looked(driver: webdriver.Chrome) -> T | bool:
            try:
                return condition(driver)
            except WebDriverException as exc:
                # ChromeDriver's other word for a stale element: the node was found in the page
                # that was there, and read after it was replaced (seen in a fresh clone).
                if STALE_NODE in (exc.msg or ""):
                    return False
                raise

        def wait() -> T:
            try:
                # A page that navigates meanwhile makes the elements just found stale: look again.
                return WebDriverWait(
                    self.driver,
                    seconds,
                    poll_frequency=0.05,
                    ignored_exceptions=(StaleElementReferenceException,),
                ).until(looked)  # type: ignore[return-value]
            except TimeoutException:
                raise AssertionError(
                    f"waited {seconds:g} s for {what} on {self.driver.current_url}"
                ) from None

        return await self.call(wait)

    async def element(self, css: str, seconds: float = WAIT_SECONDS) -> WebElement:
        from selenium.webdriver.common.by import By

        def found(driver: webdriver.Chrome) -> WebElement | bool:
            elements = driver.find_elements(By.CSS_SELECTOR, css)
            return elements[0] if elements else False

        return await self.wait_for(found, f"an element {css!r}", seconds)  # type: ignore[return-value]

    async def text_of(self, css: str) -> str:
        from selenium.webdriver.common.by import By

        def text(driver: webdriver.Chrome) -> tuple[str] | bool:
            elements = driver.find_elements(By.CSS_SELECTOR, css)
            return (str(elements[0].text),) if elements else False  # a tuple: "" is found too

        found = await self.wait_for(text, f"an element {css!r}")
        assert isinstance(found, tuple)
        return found[0]

    async def wait_text(self, css: str, text: str, seconds: float = WAIT_SECONDS) -> str:
        """Wait until the first element matching ``css`` shows ``text``; return all it shows."""
        from selenium.webdriver.common.by import By

        def shown(driver: webdriver.Chrome) -> str | bool:
            for element in driver.find_elements(By.CSS_SELECTOR, css):
                if text in element.text:
                    return str(element.text)
            return False

        return await self.wait_for(shown, f"{text!r} in {css!r}", seconds)  # type: ignore[return-value]

    async def count(self, css: str) -> int:
        from selenium.webdriver.common.by import By

        return len(await self.call(self.driver.find_elements, By.CSS_SELECTOR, css))

    async def click(self, css: str) -> None:
        element = await self.element(css)
        await self.call(element.click)

    async def type_into(self, css: str, text: str) -> None:
        element = await self.element(css)
        await self.call(element.send_keys, text)

    async def source(self) -> str:
        return await self.call(lambda: self.driver.page_source)

    async def url(self) -> str:
        return await self.call(lambda: self.driver.current_url)

    async def requests(self) -> list[str]:
        """The URLs the pages asked for since the last call (read from Chromium's log)."""

        def read() -> list[str]:
            urls = []
            for entry in self.driver.get_log("performance"):
                message = json.loads(entry["message"])["message"]
                if message.get("method") == "Network.requestWillBeSent":
                    urls.append(str(message["params"]["request"]["url"]))
            return urls

        return await self.call(read)

    async def outside_requests(self) -> list[str]:
        """What the pages asked of anything but loopback (``data:`` and ``about:`` aside)."""
        return [
            url
            for url in await self.requests()
            if not url.startswith(("http://127.0.0.1:", "data:", "about:", "blob:"))
        ]

    async def cookies(self) -> list[dict[str, Any]]:
        return await self.call(self.driver.get_cookies)
