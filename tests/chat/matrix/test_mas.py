"""Matrix Authentication Service: replacing the cross-signing identity needs the ``m.oauth``
stage. MAS cannot run here; the fake answers as Synapse 1.163 does when MAS is enabled
(``synapse/rest/client/keys.py``, ``SigningKeyUploadServlet``), recorded below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.chat.matrix.crosssign import CrossSigner, CrossSigningError
from bridge.chat.matrix.files import MatrixFiles
from bridge.config import build_config
from bridge.doctor import Report, check_chats

pytestmark = pytest.mark.anyio

USER = "@bot:example.org"
RESET_URL = "https://auth.example.org/account/?action=org.matrix.cross_signing_reset"
# What Synapse answers /keys/device_signing/upload with when MAS delegates the login and the
# account already has a cross-signing identity that MAS did not mark replaceable.
SYNAPSE_MAS_ANSWER = {
    "session": "dummy",
    "flows": [{"stages": ["m.oauth"]}, {"stages": ["org.matrix.cross_signing_reset"]}],
    "params": {
        "m.oauth": {"url": RESET_URL},
        "org.matrix.cross_signing_reset": {"url": RESET_URL},
    },
    "msg": "To reset your end-to-end encryption cross-signing identity, you first need to "
    f"approve it at {RESET_URL} and then try again.",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeResponse:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self._body = body

    async def json(self, content_type: Any = None) -> Any:
        return self._body

    def release(self) -> None:
        pass


class MasHomeserver:
    """The client side of a homeserver behind MAS: an identity exists, a reset needs MAS."""

    def __init__(self, approved: bool = False) -> None:
        self.user_id = USER
        self.device_id = "BOTDEV"
        self.access_token = "mat_token"
        self.olm = None
        self.approved = approved
        self.uploads: list[dict[str, Any]] = []

    async def send(self, method: str, path: str, data: str, **_: Any) -> FakeResponse:
        body = json.loads(data)
        if path.endswith("/keys/query"):
            master = {"user_id": USER, "usage": ["master"], "keys": {"ed25519:old": "old"}}
            return FakeResponse(200, {"master_keys": {USER: master}, "device_keys": {}})
        assert path.endswith("/keys/device_signing/upload")
        self.uploads.append(body)
        if self.approved:
            return FakeResponse(200, {})
        return FakeResponse(401, SYNAPSE_MAS_ANSWER)


async def test_an_oauth_stage_names_the_reset_url_and_the_password_is_not_tried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = MatrixFiles.under(tmp_path)
    files.prepare()
    server = MasHomeserver()
    signer = CrossSigner(server, files.cross_signing, "the password")  # type: ignore[arg-type]
    with pytest.raises(CrossSigningError) as failed:
        await signer.ensure()
    assert RESET_URL in str(failed.value)
    assert "approve" in str(failed.value)
    # The password means nothing to MAS: it is not sent (nor retried).
    assert len(server.uploads) == 1
    assert "auth" not in server.uploads[0]
    assert any(RESET_URL in m for m in caplog.messages)
    # doctor says what the operator must do.
    config = build_config(
        {
            "bridge": {"data_dir": str(tmp_path)},
            "matrix": {
                "homeserver": "https://matrix.example.org",
                "user_id": USER,
                "password": "the password",
            },
        },
        environ={},
    )
    report = Report()
    check_chats(config, report)
    [line] = [x for x in report.lines if RESET_URL in x]
    assert line.startswith("✗") and "restart" in line


async def test_once_approved_the_next_start_publishes_the_same_keys(tmp_path: Path) -> None:
    files = MatrixFiles.under(tmp_path)
    files.prepare()
    server = MasHomeserver()
    signer = CrossSigner(server, files.cross_signing, None)  # type: ignore[arg-type]
    with pytest.raises(CrossSigningError):
        await signer.ensure()
    made = files.cross_signing.read_text()
    server.approved = True
    with pytest.raises(CrossSigningError, match="device keys are not on the homeserver"):
        await signer.ensure()
    assert files.cross_signing.read_text() == made
    assert server.uploads[0]["master_key"] == server.uploads[1]["master_key"]
    # Nothing waits for the operator any more.
    config = build_config(
        {
            "bridge": {"data_dir": str(tmp_path)},
            "matrix": {
                "homeserver": "https://matrix.example.org",
                "user_id": USER,
                "password": "x",
            },
        },
        environ={},
    )
    report = Report()
    check_chats(config, report)
    assert not [x for x in report.lines if RESET_URL in x]
