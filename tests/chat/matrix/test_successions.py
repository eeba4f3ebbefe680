"""Which room replaced which (upgrades.Successions) and the rule that follows it, no server."""

from __future__ import annotations

from pathlib import Path

from bridge.chat.common.access import AccessRule
from bridge.chat.matrix.upgrades import FollowingRule, Successions


def test_a_config_listing_the_old_room_applies_to_each_successor(tmp_path: Path) -> None:
    path = tmp_path / "upgrades.json"
    successions = Successions(path)
    rule = FollowingRule.following(AccessRule.of([], ["!a:x"]), successions)
    assert not rule.allows("@bob:x", "!b:x")
    successions.await_join("!a:x", "!b:x")
    assert successions.awaited_for("!b:x") == "!a:x"
    assert rule.allows("@bob:x", "!b:x")
    successions.followed("!a:x", "!b:x")
    successions.followed("!b:x", "!c:x")
    assert successions.awaited_for("!b:x") is None
    # Read back after a restart: the chain still leads to the listed room.
    again = FollowingRule.following(AccessRule.of([], ["!a:x"]), Successions(path))
    assert again.allows("@bob:x", "!c:x")
    assert not again.allows("@bob:x", "!d:x")


def test_a_rule_of_people_only_is_unchanged_and_a_loop_ends(tmp_path: Path) -> None:
    successions = Successions()
    successions.followed("!a:x", "!b:x")
    successions.followed("!b:x", "!a:x")
    assert successions.origin("!a:x") in ("!a:x", "!b:x")
    rule = FollowingRule.following(AccessRule.of(["@alice:x"], []), successions)
    assert rule.allows("@alice:x", "!b:x")
    assert not rule.allows("@mallory:x", "!b:x")


def test_an_unreadable_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "upgrades.json"
    path.write_text("[1, 2")
    assert Successions(path).origin("!a:x") == "!a:x"
    path.write_text('{"followed": {"!a:x": 3}, "awaited": []}')
    assert Successions(path).origin("!a:x") == "!a:x"
