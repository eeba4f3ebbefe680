"""Files in and out: attachment references, capped downloads, decryption, uploads."""

from __future__ import annotations

import json
import mimetypes
from typing import Any, BinaryIO
from urllib.parse import quote, urlparse

from nio import AsyncClient, UploadError, UploadResponse
from nio.crypto.attachments import decrypt_attachment
from nio.exceptions import EncryptionError

from bridge.core.events import AttachmentError, AttachmentRef, OutgoingFile

from .imagesize import HEADER_BYTES, image_size
from .ratelimit import RoomSendQueue

# Authenticated media (spec v1.11); older homeservers only have the unauthenticated path.
_MEDIA_PATH = "/_matrix/client/v1/media/download"
_LEGACY_MEDIA_PATH = "/_matrix/media/v3/download"
_AUTHENTICATED_MEDIA_FEATURE = "org.matrix.msc3916.stable"
_CHUNK = 64 * 1024
_DOWNLOAD_TIMEOUT = 300.0
# Message types that carry a file.
MEDIA_MSGTYPES = frozenset({"m.image", "m.file", "m.video", "m.audio"})


def attachment_ref(content: dict[str, Any]) -> AttachmentRef | None:
    """The file of an ``m.image``/``m.file``/... content, plain or encrypted, or None."""
    raw_info = content.get("info")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    raw_file = content.get("file")
    encrypted: dict[str, Any] | None = raw_file if isinstance(raw_file, dict) else None
    url = encrypted.get("url") if encrypted else content.get("url")
    if not isinstance(url, str) or not url.startswith("mxc://"):
        return None
    name = str(content.get("filename") or content.get("body") or "file")
    mimetype = str(info.get("mimetype") or mimetypes.guess_type(name)[0] or "")
    size = info.get("size")
    source: dict[str, Any] = {"url": url}
    if encrypted:
        # Only what decryption needs: the key, the IV and the ciphertext's hash.
        source["file"] = {k: encrypted.get(k) for k in ("key", "iv", "hashes", "v")}
    return AttachmentRef(
        name=name,
        mimetype=mimetype or "application/octet-stream",
        size=size if isinstance(size, int) and size >= 0 else None,
        source=json.dumps(source),
    )


def caption(content: dict[str, Any]) -> str:
    """A media message's caption: its ``body`` when a separate ``filename`` is given."""
    body = content.get("body")
    filename = content.get("filename")
    if isinstance(body, str) and isinstance(filename, str) and filename and body != filename:
        return body
    return ""


def _spec_version(version: str) -> tuple[int, int] | None:
    major, _, minor = version.removeprefix("v").partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


async def authenticated_media(client: AsyncClient) -> bool:
    """Whether the homeserver serves authenticated media (``/versions`` says so)."""
    try:
        response = await client.send("GET", "/_matrix/client/versions", timeout=30)
    except (OSError, TimeoutError):
        return True  # the usual case today; a download will say if it is wrong
    try:
        body = await response.json(content_type=None) if response.status == 200 else {}
    except ValueError:
        body = {}
    finally:
        response.release()
    if not isinstance(body, dict):
        return True
    versions = body.get("versions")
    if not isinstance(versions, list):
        versions = []
    features = body.get("unstable_features")
    if isinstance(features, dict) and features.get(_AUTHENTICATED_MEDIA_FEATURE) is True:
        return True
    known = [_spec_version(v) for v in versions if isinstance(v, str)]
    return any(v is not None and v >= (1, 11) for v in known)


def _download_path(mxc: str, authenticated: bool = True) -> str:
    parsed = urlparse(mxc)
    server, media_id = parsed.netloc, parsed.path.lstrip("/")
    if not server or not media_id or "/" in media_id:
        raise AttachmentError("the attachment has an invalid address")
    base = _MEDIA_PATH if authenticated else _LEGACY_MEDIA_PATH
    return f"{base}/{quote(server, safe='')}/{quote(media_id, safe='')}?allow_remote=true"


def _too_large(ref: AttachmentRef, max_bytes: int) -> AttachmentError:
    return AttachmentError(f"{ref.name} is too large (the limit is {max_bytes:,} bytes)")


async def download(
    client: AsyncClient,
    ref: AttachmentRef,
    out: BinaryIO,
    max_bytes: int,
    *,
    authenticated: bool = True,
) -> int:
    """Fetch ``ref`` into ``out``, a new file the core opened (through authenticated media
    where the homeserver has it); return its size."""
    try:
        source = json.loads(ref.source)
        url = source["url"]
        file_info = source.get("file")
    except (ValueError, KeyError, TypeError):
        raise AttachmentError("the attachment reference is not a Matrix file") from None
    if ref.size is not None and ref.size > max_bytes:
        raise _too_large(ref, max_bytes)
    # The token goes in a header (nio's mxc_to_http would put it in the URL).
    headers = {"Authorization": f"Bearer {client.access_token}"}
    try:
        response = await client.send(
            "GET", _download_path(url, authenticated), headers=headers, timeout=_DOWNLOAD_TIMEOUT
        )
    except (OSError, TimeoutError) as exc:
        raise AttachmentError(f"could not download {ref.name} ({type(exc).__name__})") from None
    try:
        if response.status != 200:
            raise AttachmentError(f"could not download {ref.name} (HTTP {response.status})")
        data = bytearray()
        async for chunk in response.content.iter_chunked(_CHUNK):
            data.extend(chunk)
            # AES-CTR keeps the size: the cap holds for the ciphertext too.
            if len(data) > max_bytes:
                raise _too_large(ref, max_bytes)
    finally:
        response.release()
    payload = bytes(data)
    if file_info:
        payload = _decrypt(ref, payload, file_info)
    out.write(payload)  # a local regular file: quick
    return len(payload)


def _decrypt(ref: AttachmentRef, ciphertext: bytes, file_info: dict[str, Any]) -> bytes:
    try:
        return decrypt_attachment(
            ciphertext,
            file_info["key"]["k"],
            file_info["hashes"]["sha256"],
            file_info["iv"],
        )
    except (EncryptionError, KeyError, TypeError, ValueError):
        raise AttachmentError(f"could not decrypt {ref.name}") from None


async def upload(
    client: AsyncClient,
    queue: RoomSendQueue,
    file: OutgoingFile,
    title: str | None,
    *,
    encrypt: bool,
) -> dict[str, Any]:
    """Upload ``file``; return the ``m.image``/``m.file`` content that shows it."""
    name = file.name
    size = file.size
    mimetype = mimetypes.guess_type(name)[0] or "application/octet-stream"
    keys: dict[str, Any] | None = None

    async def call() -> UploadResponse | UploadError:
        nonlocal keys
        response, keys = await client.upload(
            lambda _429s, _timeouts: file.data,
            content_type=mimetype,
            filename=name,
            encrypt=encrypt,
            filesize=size,
        )
        return response

    response = await queue.retrying(call)
    if not isinstance(response, UploadResponse):
        raise RuntimeError(f"upload of {name} failed: {response}")
    info: dict[str, Any] = {"mimetype": mimetype, "size": size}
    is_image = mimetype.startswith("image/")
    if is_image:
        dimensions = image_size(file.data[:HEADER_BYTES])
        if dimensions is not None:
            info["w"], info["h"] = dimensions
    content: dict[str, Any] = {
        "msgtype": "m.image" if is_image else "m.file",
        "body": title or name,
        "filename": name,
        "info": info,
    }
    if encrypt and keys:
        content["file"] = {"url": response.content_uri, **keys}
    else:
        content["url"] = response.content_uri
    return content
