"""The ledger of refusal notices keeps exactly ``capacity`` pairs (found by mutation testing)."""

from __future__ import annotations

from bridge.chat.slack.access import NoticeLedger


def test_a_full_ledger_forgets_only_the_oldest_pair() -> None:
    ledger = NoticeLedger(capacity=2)
    assert ledger.first_time("U1", "C1") and ledger.first_time("U2", "C1")
    assert not ledger.first_time("U1", "C1"), "two pairs fit in a ledger of two"
    assert ledger.first_time("U3", "C1")  # the oldest pair (U1) is forgotten
    assert ledger.first_time("U1", "C1")
    assert not ledger.first_time("U3", "C1")
