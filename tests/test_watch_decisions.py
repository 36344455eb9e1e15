"""The pure decisions behind arm_watch and record_verification, without a database."""

from dataclasses import replace

import pytest

from store.records import WatchRecord
from store.watches import arm_decision, coalesce_due, ingress_gate, verification_decision

WATCH = WatchRecord(
    owner_did="o",
    connector_name="c",
    model="m",
    account_key="a",
    source_id="s",
    document_id="d",
    repair_generation=2,
    verification_status="verified",
    verification_attempts=1,
    observed_winner_digest="observed",
    verified_state_digest="verified",
    next_attempt_at=None,
    claimed_until=500,
    defer_reason=None,
    version=3,
    created_at=0,
    updated_at=0,
)


@pytest.mark.parametrize(
    ("triggering", "current", "passes"),
    [
        ("new", "new", True),
        ("new", "other", False),
        (None, None, False),
        ("observed", "observed", False),
        ("verified", "verified", False),
    ],
)
def test_ingress_gate__cases(triggering, current, passes):
    assert ingress_gate(triggering, current, "verified", "observed") is passes


@pytest.mark.parametrize(
    ("status", "reason", "triggering", "decision"),
    [
        ("verified", "ingress", "new", "open"),
        ("repair_failed", "ingress", "new", "open"),
        ("pending_verification", "ingress", "new", "coalesce"),
        ("verified", "ingress", "observed", "noop"),
        ("pending_verification", "manual", "observed", "open"),
        ("verified", "manual", None, "open"),
    ],
)
def test_arm_decision__cases(status, reason, triggering, decision):
    stored = replace(WATCH, verification_status=status)
    assert arm_decision(reason, stored, triggering, triggering) == decision


@pytest.mark.parametrize(("stored", "due", "expected"), [(None, 7, 7), (5, 7, 5), (9, 7, 7)])
def test_coalesce_due__earlier_wins(stored, due, expected):
    assert coalesce_due(stored, due) == expected


def decide(stored=WATCH, **overrides):
    arguments = {
        "generation": 2,
        "claimed_until": None,
        "fetched_digest": "cur",
        "current_winner": "cur",
        "max_attempts": 3,
    } | overrides
    return verification_decision(stored, **arguments)


def test_verification_decision__generation_before_claim():
    assert decide(generation=1, claimed_until=1) == "stale-generation"
    assert decide(claimed_until=1) == "stale-claim"
    assert decide(None) == "stale-generation"


def test_verification_decision__outcomes():
    assert decide() == "verified"
    assert decide(claimed_until=500) == "verified"
    assert decide(fetched_digest="old") == "pending"
    assert decide(fetched_digest=None, current_winner=None) == "pending"
    assert decide(fetched_digest="old", max_attempts=2) == "repair_failed"
    assert decide(fetched_digest="old", max_attempts=1) == "repair_failed"
