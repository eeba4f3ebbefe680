"""Slack files: downloads with the bot token (size-capped), uploads with ``files_upload_v2``."""

from __future__ import annotations

import functools
from typing import BinaryIO
from urllib.parse import urljoin, urlsplit

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.bound import Retries
from bridge.chat.slack.client import CALL_ERRORS, describe
from bridge.chat.slack.events import FILES_INFO, SlackFile, attachments
from bridge.core.events import AttachmentError, AttachmentRef

_CHUNK = 64 * 1024
# A download taking longer than this (seconds) is given up.
DOWNLOAD_TIMEOUT = 300.0
# Slack's file servers redirect once or twice; more is a loop.
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})

MISSING_SCOPE = (
    "Slack answered a web page instead of the file: the app needs the files:read scope "
    "(add it and reinstall the app) or the download was not authorized"
)


def size_label(max_bytes: int) -> str:
    megabytes = max_bytes / (1024 * 1024)
    return (
        f"{megabytes:.0f} MB"
        if megabytes >= 10 or megabytes.is_integer()
        else f"{megabytes:.1f} MB"
    )


def too_big(max_bytes: int) -> AttachmentError:
    return AttachmentError(f"file is larger than {size_label(max_bytes)}")


class FileHosts:
    """Where the bot token may be sent: Slack's own hosts, and the API host of the config
    (a test server or a proxy). A file URL elsewhere is refused rather than handed the token."""

    def __init__(self, api_url: str) -> None:
        parts = urlsplit(api_url)
        self._api_host = (parts.hostname or "").lower()
        self._api_scheme = parts.scheme

    def trusts(self, url: str) -> bool:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if host and host == self._api_host and parts.scheme == self._api_scheme:
            return True
        return parts.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com"))


async def download(
    ref: AttachmentRef,
    out: BinaryIO,
    max_bytes: int,
    *,
    token: str,
    hosts: FileHosts,
) -> int:
    """Save ``ref`` into ``out`` (a new file the core opened); return its size. Raises
    :class:`AttachmentError` with a reason for the thread: too big, not a Slack URL, an HTML
    page (missing scope), HTTP errors."""
    if ref.size is not None and ref.size > max_bytes:
        raise too_big(max_bytes)
    if not hosts.trusts(ref.source):
        raise AttachmentError(f"{ref.name}: not a Slack file URL")
    try:
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT)
        ) as session:
            return await _fetch(session, ref, out, max_bytes, token=token, hosts=hosts)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise AttachmentError(f"{ref.name}: download failed ({type(exc).__name__})") from None


async def _fetch(
    session: aiohttp.ClientSession,
    ref: AttachmentRef,
    out: BinaryIO,
    max_bytes: int,
    *,
    token: str,
    hosts: FileHosts,
) -> int:
    """Follow redirects ourselves: aiohttp drops ``Authorization`` on a cross-origin redirect,
    and Slack's file servers redirect across origins. The token goes along only to Slack's
    own hosts; a redirect elsewhere is followed without it."""
    url = ref.source
    for _ in range(MAX_REDIRECTS + 1):
        headers = {"Authorization": f"Bearer {token}"} if hosts.trusts(url) else {}
        async with session.get(url, headers=headers, allow_redirects=False) as response:
            location = response.headers.get("Location")
            if response.status in _REDIRECTS and location:
                url = urljoin(url, location)
                continue
            _check_response(response, max_bytes, ref)
            return await _save(response, out, max_bytes)
    raise AttachmentError(f"{ref.name}: download failed (too many redirects)")


def _expects_html(ref: AttachmentRef) -> bool:
    return ref.mimetype in _HTML_TYPES or ref.name.lower().endswith((".html", ".htm"))


def _check_response(response: aiohttp.ClientResponse, max_bytes: int, ref: AttachmentRef) -> None:
    if response.status != 200:
        raise AttachmentError(f"download failed: Slack answered HTTP {response.status}")
    # A web page where another kind of file was expected is Slack's sign-in page: the token
    # was refused or lacks files:read. A real HTML attachment is HTML.
    if response.content_type in _HTML_TYPES and not _expects_html(ref):
        raise AttachmentError(MISSING_SCOPE)
    if response.content_length is not None and response.content_length > max_bytes:
        raise too_big(max_bytes)


async def _save(response: aiohttp.ClientResponse, out: BinaryIO, max_bytes: int) -> int:
    total = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        total += len(chunk)
        if total > max_bytes:
            # Stop reading: the sender's Content-Length may lie or be absent.
            raise too_big(max_bytes)
        out.write(chunk)  # a local regular file: quick
    return total


class Attachments:
    """The files of people's messages, fetched with the bot token (see :func:`download`)."""

    def __init__(self, client: AsyncWebClient, retries: Retries, hosts: FileHosts) -> None:
        self._client = client
        self._retries = retries
        self._hosts = hosts

    async def fetch(self, ref: AttachmentRef, out: BinaryIO, max_bytes: int) -> int:
        token = self._client.token
        if not token:
            raise RuntimeError("the Slack client has no bot token")
        if ref.source.startswith(FILES_INFO):
            ref = await self._described(ref)
        return await download(ref, out, max_bytes, token=token, hosts=self._hosts)

    async def _described(self, ref: AttachmentRef) -> AttachmentRef:
        """A file the event gave without URLs (Slack Connect), as ``files.info`` describes it."""
        file_id = ref.source.removeprefix(FILES_INFO)
        try:
            response = await self._retries.run(
                functools.partial(self._client.files_info, file=file_id),
                what="files.info",
                thread_key=file_id,
            )
        except CALL_ERRORS as exc:
            raise AttachmentError(
                f"{ref.name}: Slack did not let the bot read this file ({describe(exc)})"
            ) from None
        [described] = attachments([SlackFile.model_validate(response.get("file") or {})]) or [ref]
        if described.source.startswith(FILES_INFO):
            raise AttachmentError(f"{ref.name}: Slack gave no download link for this file")
        return described
