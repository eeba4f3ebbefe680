"""The access rule: (user listed or no users listed) and (place listed or no places listed)."""

from __future__ import annotations

import pytest

from bridge.chat.common.access import AccessRule


@pytest.mark.parametrize(
    ("users", "places", "expected"),
    [
        # Both lists empty: nobody.
        ([], [], {("U_ALICE", "C_TEAM"): False, ("U_BOB", "C_OTHER"): False}),
        # Only users: those people, anywhere the bot is.
        (["U_ALICE"], [], {("U_ALICE", "C_OTHER"): True, ("U_BOB", "C_TEAM"): False}),
        # Only places: everyone in those places, nobody elsewhere.
        ([], ["C_TEAM"], {("U_BOB", "C_TEAM"): True, ("U_BOB", "C_OTHER"): False}),
        # Both: these people, in these places.
        (
            ["U_ALICE"],
            ["C_TEAM"],
            {
                ("U_ALICE", "C_TEAM"): True,
                ("U_BOB", "C_TEAM"): False,
                ("U_ALICE", "C_OTHER"): False,
            },
        ),
    ],
)
def test_the_four_combinations(
    users: list[str], places: list[str], expected: dict[tuple[str, str], bool]
) -> None:
    rule = AccessRule.of(users, places)
    for (user, place), allowed in expected.items():
        assert rule.allows(user, place) is allowed, (user, place)


def test_blank_entries_do_not_open_anything() -> None:
    rule = AccessRule.of([" ", ""], [""])
    assert rule.closed
    assert not rule.allows("", "")
