"""The run's one homeserver serves both kinds of test: limits lifted, and Synapse's defaults.

Every worker registers its users on the same Synapse (tests/shared_servers.py). Its per-user
limits keep Synapse's defaults; ``synapse`` lifts them for each user it registers, and
``synapse_default_limits`` does not, so the 429 tests' users still meet them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from .synapse import MatrixUser, Synapse

pytestmark = pytest.mark.synapse

# Synapse's default rc_message: a burst of 10, then one every 5 s.
SENDS = 15


def _call(synapse: Synapse, user: MatrixUser, method: str, path: str, body: Any) -> int:
    request = urllib.request.Request(
        f"{synapse.base_url}/_matrix/client/v3{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {user.access_token}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


def _statuses_of_a_burst(synapse: Synapse, user: MatrixUser) -> list[int]:
    request = urllib.request.Request(
        f"{synapse.base_url}/_matrix/client/v3/createRoom",
        data=b"{}",
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {user.access_token}",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        room = json.loads(response.read())["room_id"]
    return [
        _call(
            synapse,
            user,
            "PUT",
            f"/rooms/{room}/send/m.room.message/t{n}",
            {"msgtype": "m.text", "body": f"burst {n}"},
        )
        for n in range(SENDS)
    ]


def test_users_of_the_shared_server_never_meet_a_limit(synapse: Synapse) -> None:
    assert _statuses_of_a_burst(synapse, synapse.register("lifted")) == [200] * SENDS


def test_users_of_the_default_limits_view_meet_synapses_default(
    synapse: Synapse, synapse_default_limits: Synapse
) -> None:
    assert synapse_default_limits.base_url == synapse.base_url  # one server
    statuses = _statuses_of_a_burst(synapse_default_limits, synapse_default_limits.register("lim"))
    # The burst (less the room's creation, which counts too), then refusals.
    assert statuses[:9] == [200] * 9
    assert 429 in statuses[9:]
