"""The Slack Web API client: every call spends from the app's rate budget; the SDK's handlers
retry server errors and dropped connections; our own bounded retries keep replies from being
lost to a burst of 429s.

The SDK's own 429 handler is left out on purpose: it sleeps the whole ``Retry-After`` inside
the call, which would stall a reply's pump. A 429 instead blocks the method in the budget for
everyone, an optional update is simply skipped, and an urgent call (:func:`with_retries`)
waits and tries again.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiohttp
import anyio
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.jitter import Jitter
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bridge.chat.slack.budget import RateBudget
from bridge.chat.slack.tiers import scope_key
from bridge.config import SlackSection

log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors worth another try later: Slack is busy or briefly broken.
TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
# What a failed Web API call raises: Slack's answer, a request we built wrong, the network.
CALL_ERRORS = (SlackApiError, SlackRequestError, aiohttp.ClientError, OSError, TimeoutError)


class _ProportionalJitter(Jitter):
    """Up to ``duration`` again at random (the SDK's default adds up to a whole second)."""

    def recalculate(self, duration: float) -> float:
        return duration * (1 + random.random())


def retry_handlers(backoff: float = 0.5) -> list[AsyncRetryHandler]:
    """The SDK's own handlers for 500/503 and dropped connections (429s: see the module)."""
    interval = BackoffRetryIntervalCalculator(backoff_factor=backoff, jitter=_ProportionalJitter())
    return [
        AsyncServerErrorRetryHandler(max_retry_count=2, interval_calculator=interval),
        AsyncConnectionErrorRetryHandler(max_retry_count=2, interval_calculator=interval),
    ]


def _scope_of(budget: RateBudget, method: str, *bodies: Any) -> str | None:
    """What the call counts under in the budget: its channel, or channel and thread, where the
    method's tier counts that way (:func:`bridge.chat.slack.tiers.scope_key`)."""
    tier = budget.tiers.get(method)
    if tier is None:
        return None
    for body in bodies:
        if isinstance(body, dict) and (body.get("channel") or body.get("channel_id")):
            return scope_key(tier, body)
    return None


class BudgetedWebClient(AsyncWebClient):
    """An ``AsyncWebClient`` whose every Web API call spends from one :class:`RateBudget`
    (the streams of ``chat_stream`` included: they call through the client)."""

    def __init__(self, *, budget: RateBudget, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.budget = budget
        # Told of every 429 (for metrics: each is waited out or skipped, never lost).
        self.on_rate_limited: Callable[[str], None] | None = None

    async def api_call(
        self,
        api_method: str,
        *,
        http_verb: str = "POST",
        files: dict[str, Any] | None = None,
        data: Any = None,
        params: dict[str, Any] | None = None,
        json: dict[str, Any] | None = None,
        headers: dict[str, Any] | None = None,
        auth: dict[str, Any] | None = None,
    ) -> AsyncSlackResponse:
        channel = _scope_of(self.budget, api_method, json, data, params)
        await self.budget.spend(api_method, channel)
        try:
            return await super().api_call(
                api_method,
                http_verb=http_verb,
                files=files,
                data=data,
                params=params,
                json=json,
                headers=headers,
                auth=auth,
            )
        except SlackApiError as exc:
            if exc.response is not None and exc.response.status_code == 429:
                wait = retry_after(exc)
                self.budget.limited(api_method, channel, 1.0 if wait is None else wait)
                if self.on_rate_limited is not None:
                    self.on_rate_limited("429")
            raise


class ObservedRetries(AsyncRetryHandler):
    """Wraps one of the SDK's handlers to report each retry it decides on (for metrics)."""

    def __init__(self, inner: AsyncRetryHandler, reason: str, observe: Callable[[str], None]):
        super().__init__(
            max_retry_count=inner.max_retry_count,
            interval_calculator=inner.interval_calculator,
        )
        self.inner = inner
        self.reason = reason
        self.observe = observe

    async def can_retry_async(self, **kwargs: Any) -> bool:
        allowed = await self.inner.can_retry_async(**kwargs)
        if allowed:
            self.observe(self.reason)
        return allowed

    async def prepare_for_next_attempt_async(self, **kwargs: Any) -> None:
        await self.inner.prepare_for_next_attempt_async(**kwargs)


def observe_retries(client: AsyncWebClient, observe: Callable[[str], None]) -> None:
    """Report every retry the client's handlers make ("5xx" or "connection") and every 429
    Slack answers ("429")."""
    if isinstance(client, BudgetedWebClient):
        client.on_rate_limited = observe
    reasons: dict[type[AsyncRetryHandler], str] = {
        AsyncRateLimitErrorRetryHandler: "429",
        AsyncServerErrorRetryHandler: "5xx",
        AsyncConnectionErrorRetryHandler: "connection",
    }
    client.retry_handlers[:] = [
        handler
        if isinstance(handler, ObservedRetries)
        else ObservedRetries(handler, reasons.get(type(handler), "other"), observe)
        for handler in client.retry_handlers
    ]


@asynccontextmanager
async def pooled(client: AsyncWebClient) -> AsyncIterator[None]:
    """The client's calls share one HTTP session (and its kept-alive connections) meanwhile.

    Without a session the SDK opens one per call: a new connection and, to Slack, a new TLS
    handshake each time (about 0.65 ms of CPU per call against a local server, more with TLS).
    Calls after the block (a shutdown's last notices) fall back to a session each."""
    timeout = aiohttp.ClientTimeout(total=client.timeout)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=client.trust_env_in_session) as s:
        client.session = s
        try:
            yield
        finally:
            client.session = None


def build_client(
    config: SlackSection, *, budget: RateBudget | None = None, backoff: float = 0.5
) -> BudgetedWebClient:
    if config.bot_token is None:
        raise ValueError("slack.bot_token is not set (or SLACK_BOT_TOKEN)")
    return BudgetedWebClient(
        budget=budget or RateBudget(),
        token=config.bot_token.get_secret_value(),
        base_url=config.api_url,
        retry_handlers=retry_handlers(backoff),
    )


def api_error(exc: BaseException) -> str:
    """Slack's error code of a failed call ("ratelimited", "not_allowed" ...), or ""."""
    if isinstance(exc, SlackApiError) and exc.response is not None:
        # A 5xx answer's body may be plain text rather than JSON.
        data = exc.response.data
        return str(data.get("error") or "") if isinstance(data, dict) else ""
    return ""


def describe(exc: BaseException) -> str:
    """A log-safe reason: Slack's error code, the HTTP status or the exception type (never a
    request body, which could hold a token or a user's text)."""
    if isinstance(exc, SlackApiError) and not api_error(exc) and exc.response is not None:
        return f"HTTP {exc.response.status_code}"
    return api_error(exc) or type(exc).__name__


def _rate_limited(exc: BaseException) -> bool:
    return (
        isinstance(exc, SlackApiError)
        and exc.response is not None
        and exc.response.status_code == 429
    )


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, SlackApiError):
        return api_error(exc) in TRANSIENT_ERRORS or exc.response.status_code >= 500
    if isinstance(exc, SlackRequestError):
        return False  # a request we built wrong: trying again will not help
    return isinstance(exc, aiohttp.ClientError | OSError | TimeoutError)


def retry_after(exc: BaseException) -> float | None:
    """Slack's Retry-After of a 429, in seconds (in full: calling earlier only earns another
    429), or None."""
    if not isinstance(exc, SlackApiError):
        return None
    value = exc.response.headers.get("Retry-After") or exc.response.headers.get("retry-after")
    if isinstance(value, list):
        value = value[0] if value else None
    try:
        return max(float(value), 0.0) if value is not None else None
    except (TypeError, ValueError):
        return None


async def with_retries(
    operation: Callable[[], Awaitable[T]],
    *,
    what: str,
    thread_key: str,
    attempts: int = 4,
    backoff: float = 0.5,
    on_retry: Callable[[str], None] | None = None,
) -> T:
    """Run ``operation`` again (with backoff) while it fails transiently, up to ``attempts``.

    On top of the SDK's handlers: a reply must not be lost to a burst of 429s or a Slack
    outage of a few seconds. The last failure is logged with the thread key and re-raised.
    """
    for attempt in range(1, attempts + 1):
        try:
            return await operation()
        except (
            SlackApiError,
            SlackRequestError,
            aiohttp.ClientError,
            OSError,
            TimeoutError,
        ) as exc:
            if attempt == attempts or not is_transient(exc):
                log.error(
                    "Slack %s failed for %s after %d attempt(s): %s",
                    what,
                    thread_key,
                    attempt,
                    describe(exc),
                )
                raise
            delay = retry_after(exc)
            if on_retry is not None and not _rate_limited(exc):
                # A 429 is counted by the client that got it (BudgetedWebClient), once.
                on_retry("transient")
            if delay is None:
                delay = backoff * 2 ** (attempt - 1)
            log.warning(
                "Slack %s failed for %s (%s); retrying in %.1f s",
                what,
                thread_key,
                describe(exc),
                delay,
            )
            await anyio.sleep(delay)
    raise AssertionError("unreachable")  # the loop either returns or raises
