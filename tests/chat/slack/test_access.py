"""Access: deny by default; (listed user or none listed) and (listed channel or none); one
notice per refusal."""

from __future__ import annotations

from bridge.chat.slack.access import AccessPolicy, NoticeLedger


def test_empty_lists_allow_nobody() -> None:
    policy = AccessPolicy([], [" "])
    assert not policy.allows("U1", "C1")
    assert not policy.allows("U1", "D1")


def test_listed_users_anywhere() -> None:
    policy = AccessPolicy(["U1"], [])
    assert policy.allows("U1", "C1")
    assert policy.allows("U1", "D1")
    assert not policy.allows("U2", "C1")


def test_listed_channels_for_everyone_in_them_but_not_dms() -> None:
    policy = AccessPolicy([], ["C1"])
    assert policy.allows("U9", "C1")
    assert not policy.allows("U9", "C2")
    assert not policy.allows("U9", "D9")
    assert AccessPolicy([], ["D9"]).allows("U9", "D9")


def test_both_lists_mean_these_people_in_these_channels() -> None:
    policy = AccessPolicy(["U1"], ["C1"])
    assert policy.allows("U1", "C1")
    assert not policy.allows("U1", "C2")
    assert not policy.allows("U2", "C1")
    assert not policy.allows("U1", "D1")  # a DM is a channel of its own: list it to open it


def test_notice_ledger_once_per_pair_and_bounded() -> None:
    ledger = NoticeLedger(capacity=2)
    assert ledger.first_time("U1", "C1")
    assert not ledger.first_time("U1", "C1")
    assert ledger.first_time("U1", "C2")
    assert ledger.first_time("U2", "C1")  # pushes ("U1", "C1") out
    assert ledger.first_time("U1", "C1")
