"""Files: image sizes for Element, and downloads from homeservers without authenticated media."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from nio import AsyncClient, RoomMessageImage, UploadResponse

from bridge.chat.matrix import media
from bridge.chat.matrix.imagesize import image_size
from tests.doubles import outgoing

from .conftest import matrix_world
from .synapse import Synapse

pytestmark = pytest.mark.anyio


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x80\x40\x20" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_image_sizes_from_headers() -> None:
    assert image_size(png(3, 2)) == (3, 2)
    assert image_size(b"GIF89a" + struct.pack("<HH", 640, 480) + b"\x00" * 8) == (640, 480)
    # JPEG: start of image, an APP0 segment, then the start-of-frame with the size.
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    sof = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, 300, 400) + b"\x03" + b"\x00" * 9
    assert image_size(b"\xff\xd8" + app0 + sof) == (400, 300)
    vp8x = b"RIFF\x00\x00\x00\x00WEBPVP8X" + b"\x0a\x00\x00\x00" + b"\x00" * 4
    assert image_size(vp8x + (99).to_bytes(3, "little") + (49).to_bytes(3, "little")) == (
        100,
        50,
    )
    assert image_size(b"not an image") is None
    assert image_size(b"\x89PNG\r\n\x1a\n") is None


@pytest.mark.synapse
async def test_posted_image_carries_width_and_height(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        path = tmp_path / "chart.png"
        path.write_bytes(png(3, 2))
        await world.adapter.post_file(world.thread(), outgoing(path), "the chart")
        event = await world.human.wait_event(
            world.room_id, lambda e: isinstance(e, RoomMessageImage)
        )
        info = event.source["content"]["info"]
        assert (info["w"], info["h"]) == (3, 2)
        assert info["mimetype"] == "image/png"


@pytest.fixture
async def old_homeserver(synapse: Synapse) -> AsyncIterator[str]:
    """A homeserver from before authenticated media (spec v1.11), in front of Synapse: its
    /versions stops at v1.10 and only /_matrix/media/v3 serves files."""

    async def versions(_: web.Request) -> web.Response:
        return web.json_response({"versions": ["r0.6.1", "v1.1", "v1.10"]})

    async def legacy_download(request: web.Request) -> web.StreamResponse:
        server, media_id = request.match_info["server"], request.match_info["media_id"]
        url = f"{synapse.base_url}/_matrix/client/v1/media/download/{server}/{media_id}"
        headers = {"Authorization": request.headers.get("Authorization", "")}
        async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
            return web.Response(status=r.status, body=await r.read())

    async def unknown(_: web.Request) -> web.Response:
        body = json.dumps({"errcode": "M_UNRECOGNIZED", "error": "Unrecognized request"})
        return web.Response(status=404, text=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/_matrix/client/versions", versions)
    app.router.add_get("/_matrix/media/v3/download/{server}/{media_id}", legacy_download)
    app.router.add_route("*", "/{tail:.*}", unknown)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.synapse
async def test_download_falls_back_to_legacy_media(
    synapse: Synapse, old_homeserver: str, tmp_path: Path
) -> None:
    user = synapse.register("bot")
    uploader = AsyncClient(synapse.base_url, user.user_id)
    uploader.restore_login(user.user_id, user.device_id, user.access_token)
    data = png(2, 2)
    try:
        upload, _ = await uploader.upload(
            lambda *_: data, content_type="image/png", filename="a.png", filesize=len(data)
        )
    finally:
        await uploader.close()
    assert isinstance(upload, UploadResponse)
    ref = media.attachment_ref(
        {"msgtype": "m.image", "body": "a.png", "url": upload.content_uri, "info": {}}
    )
    assert ref is not None
    client = AsyncClient(old_homeserver, user.user_id)
    client.restore_login(user.user_id, user.device_id, user.access_token)
    try:
        authenticated = await media.authenticated_media(client)
        assert authenticated is False
        dest = tmp_path / "a.png"
        with dest.open("xb") as out:
            size = await media.download(client, ref, out, 10_000, authenticated=authenticated)
    finally:
        await client.close()
    assert size == len(data)
    assert dest.read_bytes() == data
