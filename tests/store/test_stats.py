"""The dashboard's charts' counts (store.stats), on both backends: the event log's claims,
commits, failures and retries per time bucket, every bucket of the window, narrowed to a
connector, an account and a tenant, over the time index only."""

from typing import Any

import pytest
import sqlalchemy as sa

from store.errors import InvalidInput
from store.events import CANCELLED, CLAIMED, FINALIZED, LEASED, RECORDED, SEND_MARKED
from store.stats import MAX_BUCKETS, StatsBucket
from store.tables import operation_event
from tests.factories import committed_operation, recorded_operation
from tests.leasing_factories import due_record, insert_operations
from tests.store.test_query_plans import plan_of

CALLER = "did:key:caller"
OTHER = "did:key:other"


ENVELOPES = {
    CALLER: {"owner_did": "did:key:owner", "connector_name": "calendar", "account_key": "acct-1"},
    OTHER: {"owner_did": OTHER, "connector_name": "crm", "account_key": "acct-2"},
}
"""What the events of each caller's operations carry, as the store writes them: op-0's and
op-gone's (called by CALLER), op-1's (called and owned by OTHER)."""


def logged(operation_id: str, at: int, action: str, to_state: str, caller: str = CALLER) -> Any:
    return {
        "tx": 0,
        "caller_did": caller,
        "operation_id": operation_id,
        **ENVELOPES[caller],
        "at": at,
        "action": action,
        "to_state": to_state,
        "attempts": 0,
    }


async def append(store: Any, events: list[dict[str, Any]]) -> None:
    """Write ``events`` into the operations' log as they are (their ``at`` chosen)."""
    for start in range(0, len(events), 500):
        await store.db.write_all(
            operation_event.insert()
            .values(events[start : start + 500])
            .returning(operation_event.c.id)
        )


async def two_tenants(store: Any) -> None:
    """op-0 (calendar, acct-1, called by CALLER), op-1 (crm, acct-2, called and owned by
    OTHER), each claimed at 1000 and finished at 1100; and the claim of op-gone (calendar,
    acct-1, called by CALLER), whose row was collected."""
    await insert_operations(
        store,
        [
            due_record(store, 0),
            due_record(
                store,
                1,
                connector_name="crm",
                account_key="acct-2",
                caller_did=OTHER,
                owner_did=OTHER,
            ),
        ],
    )
    await append(
        store,
        [
            logged("op-0", 1000, CLAIMED, "attempted"),
            logged("op-0", 1100, FINALIZED, "committed"),
            logged("op-1", 1000, CLAIMED, "attempted", caller=OTHER),
            logged("op-1", 1100, RECORDED, "failed", caller=OTHER),
            logged("op-gone", 1000, CLAIMED, "attempted"),
        ],
    )


def totals(buckets: list[StatsBucket]) -> tuple[int, int, int, int]:
    return (
        sum(b.claimed for b in buckets),
        sum(b.committed for b in buckets),
        sum(b.failed for b in buckets),
        sum(b.retried for b in buckets),
    )


async def test_operation_stats__count_what_the_store_writes(store):
    await committed_operation(store, operation_id="op-c", source_id="evt-c")
    await recorded_operation(store, "failed", operation_id="op-f", source_id="evt-f")
    await recorded_operation(store, "attempted", operation_id="op-r", source_id="evt-r")
    ats = [row["at"] for row in await store.db.fetch_all(sa.select(operation_event.c.at))]

    buckets = await store.stats.operation_stats(
        since=min(ats), until=max(ats) + 1, bucket_ms=max(ats) + 1 - min(ats)
    )

    assert totals(buckets) == (3, 1, 1, 1)


async def test_operation_stats__every_bucket_of_the_window_by_its_bounds(store):
    await append(
        store,
        [
            logged("op-0", 999, CLAIMED, "attempted"),  # before the window
            logged("op-0", 1000, CLAIMED, "attempted"),
            logged("op-0", 1000, LEASED, "attempted"),  # not counted
            logged("op-0", 1050, SEND_MARKED, "attempted"),  # not counted
            logged("op-0", 1099, RECORDED, "attempted"),  # a retry
            logged("op-0", 1100, FINALIZED, "committed"),
            logged("op-1", 1249, CANCELLED, "failed"),
            logged("op-2", 1249, RECORDED, "failed"),
            logged("op-3", 1249, RECORDED, "superseded"),  # neither
            logged("op-4", 1250, CLAIMED, "attempted"),  # at until: after the window
        ],
    )

    buckets = await store.stats.operation_stats(since=1000, until=1250, bucket_ms=100)

    assert buckets == [
        StatsBucket(1000, 1100, claimed=1, committed=0, failed=0, retried=1),
        StatsBucket(1100, 1200, claimed=0, committed=1, failed=0, retried=0),
        StatsBucket(1200, 1250, claimed=0, committed=0, failed=2, retried=0),
    ]


async def test_operation_stats__an_empty_window_has_its_buckets_at_zero(store):
    await two_tenants(store)

    buckets = await store.stats.operation_stats(since=5000, until=5300, bucket_ms=100)

    assert buckets == [
        StatsBucket(start, start + 100, claimed=0, committed=0, failed=0, retried=0)
        for start in (5000, 5100, 5200)
    ]


async def test_operation_stats__narrowed_to_a_connector_an_account_and_a_tenant(store):
    await two_tenants(store)

    async def counted(**narrowed: str) -> tuple[int, int, int, int]:
        return totals(
            await store.stats.operation_stats(since=0, until=2000, bucket_ms=1000, **narrowed)
        )

    # The collected operation's claim counts wherever its operation's would.
    assert await counted() == (3, 1, 1, 0)
    assert await counted(connector_name="crm") == (1, 0, 1, 0)
    assert await counted(account_key="acct-1") == (2, 1, 0, 0)
    assert await counted(connector_name="crm", account_key="acct-1") == (0, 0, 0, 0)
    assert await counted(visible_to=OTHER) == (1, 0, 1, 0)
    assert await counted(visible_to="did:key:owner") == (2, 1, 0, 0)  # op-0's owner
    assert await counted(visible_to=CALLER) == (2, 1, 0, 0)
    assert await counted(visible_to="did:key:nobody") == (0, 0, 0, 0)


async def test_operation_stats__a_collected_operation_counts_as_it_did_while_kept(store, clock):
    """Collecting an operation leaves its events, and each counts by what it carries: the
    connector, account, caller and owner narrowing count it after as before."""
    await committed_operation(
        store, operation_id="op-crm", source_id="evt-crm", connector_name="crm", owner_did=OTHER
    )
    await committed_operation(store, operation_id="op-cal", source_id="evt-cal")
    ats = [row["at"] for row in await store.db.fetch_all(sa.select(operation_event.c.at))]
    window = {"since": min(ats), "until": max(ats) + 1, "bucket_ms": max(ats) + 1 - min(ats)}

    async def counted(**narrowed: str) -> tuple[int, int, int, int]:
        return totals(await store.stats.operation_stats(**window, **narrowed))

    narrowings: list[dict[str, str]] = [
        {},
        {"connector_name": "crm"},
        {"connector_name": "crm", "account_key": "acct-1"},
        {"account_key": "acct-1"},
        {"visible_to": OTHER},
        {"visible_to": "did:key:caller"},
        {"visible_to": "did:key:owner"},
        {"visible_to": "did:key:nobody"},
    ]
    kept = [await counted(**narrowed) for narrowed in narrowings]
    clock.advance(1)
    assert (
        await store.retention.collect_finished_operations(clock.now, failed_older_than=clock.now)
        == 2
    )

    assert [await counted(**narrowed) for narrowed in narrowings] == kept
    assert kept == [
        (2, 2, 0, 0),
        (1, 1, 0, 0),
        (1, 1, 0, 0),
        (2, 2, 0, 0),
        (1, 1, 0, 0),
        (2, 2, 0, 0),
        (1, 1, 0, 0),
        (0, 0, 0, 0),
    ]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"since": -1}, "since"),
        ({"since": "0"}, "since"),
        ({"until": 1000}, "until"),
        ({"until": 999}, "until"),
        ({"bucket_ms": 0}, "bucketMs"),
        ({"bucket_ms": True}, "bucketMs"),
        ({"until": 1000 + MAX_BUCKETS * 10 + 1}, "bucketMs"),
        ({"connector_name": ""}, "connectorName"),
        ({"account_key": 7}, "accountKey"),
        ({"visible_to": ""}, "visibleTo"),
    ],
)
async def test_operation_stats__bad_input_names_the_field(store, arguments, field):
    given = {"since": 1000, "until": 2000, "bucket_ms": 10} | arguments

    with pytest.raises(InvalidInput) as raised:
        await store.stats.operation_stats(**given)

    assert raised.value.field == field


async def test_operation_stats__the_most_buckets_are_served(store):
    buckets = await store.stats.operation_stats(since=0, until=MAX_BUCKETS * 10, bucket_ms=10)

    assert len(buckets) == MAX_BUCKETS


async def test_plan__operation_stats_walk_the_time_index_over_the_window(store):
    await two_tenants(store)
    await append(
        store,
        [
            logged(f"op-{n % 2}", 10_000 + n, action, "attempted", caller=(CALLER, OTHER)[n % 2])
            for n in range(5000)
            for action in (CLAIMED, LEASED)
        ],
    )
    await store.db.fetch_all(sa.text("ANALYZE"))

    for narrowed in ({}, {"connector_name": "crm"}, {"visible_to": OTHER}):
        plan = await plan_of(
            store.db,
            lambda narrowed=narrowed: store.stats.operation_stats(
                since=14_000, until=14_100, bucket_ms=10, **narrowed
            ),
        )
        lines = plan.splitlines()
        assert not [line for line in lines if "Seq Scan on kubun_connector_operation_event" in line]
        assert not [
            line for line in lines if line.rstrip().endswith("SCAN kubun_connector_operation_event")
        ]
        assert "kubun_connector_operation_event_at_idx" in plan, plan
