"""Retention of failed operations and the idempotency window, on both backends (docs/api.md,
'Idempotency window'): FAILED kept until its own cutoff; each collected operation leaves a
tombstone in the delete's transaction; a claim of a tombstoned key (single, batch, or a
reissue's) answers ``collected`` or ``conflict`` and writes nothing, until the tombstone
expires."""

import asyncio
from dataclasses import replace

import pytest
import sqlalchemy as sa

from store import operations as operations_module
from store import operator as operator_module
from store.database import Database
from store.errors import InvalidInput
from store.operations import OperationFilter
from store.operator import ReissueCounts, reissue_key
from store.retention import MAX_COLLECT_LIMIT
from store.tables import account, operation, operation_tombstone
from store.tombstones import PUT_TOMBSTONE, envelope_digest, key_digest, tombstone_row
from tests.factories import (
    LEASE_MS,
    bulk_finished_operations,
    claim,
    claimed_operation,
    committed_operation,
    terminal_operation,
    transition,
)

CALLER = "did:key:caller"
DAY_MS = 24 * 3600 * 1000


async def collect_all(store, cutoff: int) -> int:
    """Collect every finished operation last updated before ``cutoff``, failed ones too."""
    return await store.retention.collect_finished_operations(
        cutoff, MAX_COLLECT_LIMIT, failed_older_than=cutoff
    )


async def tombstone_count(database: Database) -> int:
    row = await database.fetch_one(
        sa.select(sa.func.count().label("n")).select_from(operation_tombstone)
    )
    assert row is not None
    return int(row["n"])


async def operation_count(database: Database) -> int:
    row = await database.fetch_one(
        sa.select(sa.func.count().label("n")).select_from(sa.table("kubun_connector_operation"))
    )
    assert row is not None
    return int(row["n"])


def lease(store, **overrides):
    """A claim of ``op-1`` (or the overridden key) with a live lease from the store's now."""
    return claim(lease_expires_at=store.clock() + LEASE_MS, **overrides)


# --- FAILED kept longer ----------------------------------------------------------------------


async def test_collect_finished_operations__failed_kept_until_its_own_cutoff(store, clock):
    for state in ["committed", "failed", "superseded"]:
        await terminal_operation(store, state, operation_id=f"op-{state}", source_id=state)
    updated_at = clock.now
    clock.advance(10 * DAY_MS)

    first = await store.retention.collect_finished_operations(
        updated_at + 1, failed_older_than=updated_at
    )
    kept = await store.operations.get_operation(CALLER, "op-failed")
    second = await store.retention.collect_finished_operations(
        updated_at + 1, failed_older_than=updated_at + 1
    )

    assert first == 2
    assert kept is not None and kept.state == "failed"
    assert second == 1
    assert await store.operations.get_operation(CALLER, "op-failed") is None


async def test_count_finished_operations__counts_by_each_states_cutoff(store, database, clock):
    await bulk_finished_operations(database, 3, updated_at=clock.now - 10, state="committed")
    await bulk_finished_operations(
        database, 2, updated_at=clock.now - 10, state="failed", prefix="failed"
    )
    retention = store.retention

    assert await retention.count_finished_operations(clock.now, failed_older_than=0) == 3
    assert await retention.count_finished_operations(0, failed_older_than=clock.now) == 2
    assert await retention.count_finished_operations(clock.now, failed_older_than=clock.now) == 5


# --- tombstones written by the collection -----------------------------------------------------


@pytest.mark.parametrize("state", ["committed", "failed", "superseded"])
async def test_collect_finished_operations__leaves_a_tombstone_of_key_envelope_and_state(
    store, database, clock, state
):
    record = await terminal_operation(store, state)
    clock.advance(1000)

    assert await collect_all(store, clock.now) == 1

    rows = await database.fetch_all(sa.select(operation_tombstone))
    assert [dict(row) for row in rows] == [
        {
            "key_digest": key_digest(CALLER, "op-1"),
            "envelope_digest": envelope_digest(record),
            "final_state": {"committed": 1, "failed": 2, "superseded": 3}[state],
            "collected_at": clock.now,
        }
    ]
    assert len(rows[0]["key_digest"]) == 12
    assert len(rows[0]["envelope_digest"]) == 8


async def test_collect_finished_operations__one_tombstone_per_collected_operation_in_batches(
    store, database, clock
):
    await bulk_finished_operations(database, 25, updated_at=clock.now - 1)
    await claimed_operation(store)

    deleted = [
        await store.retention.collect_finished_operations(
            clock.now, limit=10, failed_older_than=clock.now
        )
        for _ in range(4)
    ]

    assert deleted == [10, 10, 5, 0]
    assert await tombstone_count(database) == 25
    assert await operation_count(database) == 1


async def test_collect_finished_operations__tombstones_roll_back_with_the_delete(
    store, database, clock, monkeypatch
):
    """The tombstones are written in the delete's transaction: when writing them fails, the
    operations are not deleted either."""
    await bulk_finished_operations(database, 5, updated_at=clock.now - 1)

    async def failing(statement, rows):
        raise RuntimeError("tombstones could not be written")

    monkeypatch.setattr(database, "write_many", failing)
    with pytest.raises(RuntimeError):
        await collect_all(store, clock.now)

    assert await operation_count(database) == 5
    assert await tombstone_count(database) == 0


# --- a claim of a collected key ---------------------------------------------------------------


async def test_claim_operation__collected_key_same_envelope_answers_collected(
    store, database, clock
):
    record = await committed_operation(store)
    clock.advance(1000)
    await collect_all(store, clock.now)
    collected_at = clock.now
    clock.advance(1000)

    result = await store.operations.claim_operation(lease(store))

    assert result.status == "collected"
    assert result.operation is None
    assert result.tombstone is not None
    assert (result.tombstone.final_state, result.tombstone.collected_at) == (
        "committed",
        collected_at,
    )
    assert result.tombstone.envelope_digest == envelope_digest(record)
    assert await store.operations.get_operation(CALLER, "op-1") is None
    assert await operation_count(database) == 0


async def test_claim_operation__collected_key_drifted_envelope_conflict(store, database, clock):
    await terminal_operation(store, "failed")
    clock.advance(1000)
    await collect_all(store, clock.now)

    result = await store.operations.claim_operation(lease(store, payload_hash="sha256:drifted"))

    assert result.status == "conflict"
    assert result.operation is None
    assert result.tombstone is not None and result.tombstone.final_state == "failed"
    assert await operation_count(database) == 0


async def test_claim_operation__collected_key_writes_nothing_not_even_its_account(
    store, database, clock
):
    """The refused claim's transaction is rolled back whole: the account row the claim
    would have created is not created either."""
    await committed_operation(store, account_key="acct-gone")
    await database.write_all(sa.delete(account).returning(account.c.account_key))
    clock.advance(1000)
    await collect_all(store, clock.now)

    result = await store.operations.claim_operation(lease(store, account_key="acct-gone"))

    assert result.status == "collected"
    assert await database.fetch_all(sa.select(account)) == []


async def test_claim_operation__other_keys_claimed_beside_tombstones(store, clock):
    await committed_operation(store)
    clock.advance(1000)
    await collect_all(store, clock.now)

    other_caller = await store.operations.claim_operation(lease(store, caller_did="did:key:b"))
    other_id = await store.operations.claim_operation(
        lease(store, operation_id="op-2", source_id="evt-2")
    )

    assert other_caller.status == "claimed"
    assert other_id.status == "claimed"


async def test_claim_operation__claimed_afresh_once_the_tombstone_expired(store, database, clock):
    await committed_operation(store)
    clock.advance(1000)
    await collect_all(store, clock.now)
    collected_at = clock.now
    clock.advance(90 * DAY_MS)

    assert await store.retention.delete_expired_tombstones(collected_at) == 0
    assert (await store.operations.claim_operation(lease(store))).status == "collected"
    assert await store.retention.delete_expired_tombstones(collected_at + 1) == 1
    result = await store.operations.claim_operation(lease(store))

    assert result.status == "claimed"
    assert result.operation is not None and result.operation.state == "attempted"


async def test_claim_operation__probes_no_tombstone_apart_from_its_insert(
    store, clock, monkeypatch
):
    """The claim's hot path: neither a fresh row nor a key that exists costs a probe of its
    own; the insert's guard asks (and on PostgreSQL the claim statement's last step asks
    again, ``store.claims``)."""
    probes: list[bytes] = []
    probe = operations_module.get_tombstone

    async def counted(db, digest):
        probes.append(digest)
        return await probe(db, digest)

    monkeypatch.setattr(operations_module, "get_tombstone", counted)
    fresh = await store.operations.claim_operation(lease(store))
    replayed = await store.operations.claim_operation(lease(store))
    drifted = await store.operations.claim_operation(lease(store, payload_hash="sha256:other"))

    assert (fresh.status, replayed.status, drifted.status) == ("claimed", "exists", "conflict")
    assert probes == []


# --- claimOperations -------------------------------------------------------------------------


async def test_claim_operations__collected_items_answered_the_others_claimed(
    store, database, clock
):
    await committed_operation(store, operation_id="op-gone", source_id="evt-gone")
    await terminal_operation(store, "failed", operation_id="op-failed", source_id="evt-failed")
    clock.advance(1000)
    await collect_all(store, clock.now)
    collected_at = clock.now
    existing = await claimed_operation(store, operation_id="op-live", source_id="evt-live")

    results = await store.batches.claim_operations(
        [
            lease(store, operation_id="op-new", source_id="evt-new"),
            lease(store, operation_id="op-gone", source_id="evt-gone"),
            lease(store, operation_id="op-failed", source_id="evt-failed", target="drifted"),
            lease(store, operation_id="op-live", source_id="evt-live"),
        ]
    )

    assert [result.status for result in results] == ["claimed", "collected", "conflict", "exists"]
    assert results[0].operation is not None and results[0].operation.lease_token == "lease-A"
    assert results[1].tombstone is not None
    assert (results[1].tombstone.final_state, results[1].tombstone.collected_at) == (
        "committed",
        collected_at,
    )
    assert results[2].tombstone is not None and results[2].tombstone.final_state == "failed"
    assert results[3].operation == existing
    assert await store.operations.get_operation(CALLER, "op-gone") is None
    assert await store.operations.get_operation(CALLER, "op-failed") is None
    assert await operation_count(database) == 2


async def test_claim_operations__a_collected_item_takes_no_rank_from_its_entity(store, clock):
    """A collected key sorting first in its provider entity does not hold the entity's one
    lease: the batch runs again without it, and the fresh item of the entity is leased."""
    await committed_operation(store, operation_id="op-a")
    clock.advance(1000)
    await collect_all(store, clock.now)

    results = await store.batches.claim_operations(
        [lease(store, operation_id="op-a"), lease(store, operation_id="op-b")]
    )

    assert [result.status for result in results] == ["collected", "claimed"]
    assert results[1].operation is not None
    assert results[1].operation.lease_token == "lease-A"


async def test_claim_operations__every_item_collected_writes_nothing(store, database, clock):
    await committed_operation(store, operation_id="op-a", source_id="evt-a")
    await committed_operation(store, operation_id="op-b", source_id="evt-b")
    clock.advance(1000)
    await collect_all(store, clock.now)

    results = await store.batches.claim_operations(
        [
            lease(store, operation_id="op-a", source_id="evt-a"),
            lease(store, operation_id="op-b", source_id="evt-b"),
        ]
    )

    assert [result.status for result in results] == ["collected", "collected"]
    assert await operation_count(database) == 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_claim_operations__probes_only_the_rows_it_inserted(store, clock):
    """SQLite probes the tombstones of the keys its insert created, in its transaction; on
    PostgreSQL the insert's guard and the statement's last step do (``store.claims``)."""
    await claimed_operation(store, operation_id="op-old", source_id="evt-old")
    probed: list[list[bytes]] = []

    def observe(sql, values, _transaction):
        if "FROM kubun_connector_operation_tombstone" in sql and "INSERT" not in sql:
            probed.append([value for value in values if isinstance(value, bytes)])

    store.db.statement_observer = observe
    try:
        await store.batches.claim_operations(
            [
                lease(store, operation_id="op-old", source_id="evt-old"),
                lease(store, operation_id="op-new", source_id="evt-new"),
            ]
        )
    finally:
        store.db.statement_observer = None

    assert probed == [[key_digest(CALLER, "op-new")]]


# --- expiry -----------------------------------------------------------------------------------


async def test_delete_expired_tombstones__strictly_before_the_cutoff_at_most_limit(
    store, database, clock
):
    await bulk_finished_operations(database, 3, updated_at=clock.now - 1)
    await collect_all(store, clock.now)
    first = clock.now
    clock.advance(10)
    await bulk_finished_operations(database, 2, updated_at=clock.now - 1, prefix="later")
    await collect_all(store, clock.now)

    assert await store.retention.count_expired_tombstones(first) == 0
    assert await store.retention.count_expired_tombstones(first + 1) == 3
    assert await store.retention.delete_expired_tombstones(first + 1, limit=2) == 2
    assert await store.retention.delete_expired_tombstones(first + 1, limit=2) == 1
    assert await store.retention.delete_expired_tombstones(first + 1, limit=2) == 0
    assert await tombstone_count(database) == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cutoff": -1}, "cutoff"),
        ({"cutoff": 1.0}, "cutoff"),
        ({"limit": 0}, "limit"),
        ({"limit": MAX_COLLECT_LIMIT + 1}, "limit"),
    ],
)
async def test_delete_expired_tombstones__invalid_input_refused(store, clock, kwargs, field):
    arguments = {"cutoff": clock.now} | kwargs

    with pytest.raises(InvalidInput) as raised:
        await store.retention.delete_expired_tombstones(**arguments)

    assert raised.value.field == field


async def test_collect_finished_operations__a_key_collected_again_keeps_the_newer_tombstone(
    store, database, clock
):
    """A key whose operation is collected while an older tombstone of it is still there
    (claimed afresh after that tombstone expired, before the sweeper deleted it; here
    written directly) leaves one tombstone: the newer one."""
    await bulk_finished_operations(database, 1, updated_at=clock.now - 1, state="committed")
    await collect_all(store, clock.now)
    clock.advance(1000)
    await bulk_finished_operations(database, 1, updated_at=clock.now - 1, state="failed")
    await collect_all(store, clock.now)

    rows = await database.fetch_all(sa.select(operation_tombstone))
    assert [(row["final_state"], row["collected_at"]) for row in rows] == [(2, clock.now)]


# --- races ------------------------------------------------------------------------------------


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_claim_operation__a_collection_committed_while_its_insert_waits_answers_collected(
    store, database, database_url, clock
):
    """The claim's insert waits on the row a collection is deleting; the collection commits
    its tombstone, which the claim's snapshot, taken before, does not hold: the claim's last
    step asks again with a snapshot of its own (``store.claims``), and the claim answers
    ``collected``, writing nothing."""
    await committed_operation(store)
    clock.advance(1000)
    collector_db = Database(database_url)
    await collector_db.connect()
    held, release = asyncio.Event(), asyncio.Event()

    async def collect() -> None:
        async with collector_db.write_transaction():
            rows = await collector_db.write_all(
                sa.delete(operation)
                .where(operation.c.caller_did == CALLER, operation.c.operation_id == "op-1")
                .returning(operation)
            )
            await collector_db.write_prepared(PUT_TOMBSTONE, tombstone_row(rows[0], clock.now))
            held.set()
            await release.wait()

    async def waiting_on_a_lock() -> bool:
        row = await database.fetch_one(
            sa.text(
                "SELECT count(*) AS n FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        )
        return row is not None and row["n"] > 0

    try:
        collecting = asyncio.create_task(collect())
        await held.wait()
        claiming = asyncio.create_task(store.operations.claim_operation(lease(store)))
        while not await waiting_on_a_lock():
            await asyncio.sleep(0.01)
        release.set()
        await collecting
        result = await claiming
    finally:
        release.set()
        await collector_db.disconnect()

    assert result.status == "collected"
    assert await store.operations.get_operation(CALLER, "op-1") is None


async def test_claims_racing_collection__a_replayed_key_is_never_claimed_afresh(
    store, database, clock
):
    """Replayed claims of committed keys race the collection of those keys, on many
    connections: each answers ``exists`` (before the collection) or ``collected`` (after),
    never ``claimed``; afterwards every key is gone and has its tombstone."""
    keys = 40
    replays = 6
    for number in range(keys):
        await committed_operation(
            store, operation_id=f"op-{number}", source_id=f"evt-{number}", account_key=f"a-{number}"
        )
    clock.advance(1000)
    claims = [
        lease(
            store, operation_id=f"op-{number}", source_id=f"evt-{number}", account_key=f"a-{number}"
        )
        for number in range(keys)
    ]
    start = asyncio.Event()

    async def collector() -> int:
        await start.wait()
        collected = 0
        while True:
            batch = await store.retention.collect_finished_operations(
                clock.now, limit=3, failed_older_than=clock.now
            )
            collected += batch
            if batch == 0:
                return collected
            await asyncio.sleep(0)

    async def replayer(offset: int) -> list[str]:
        await start.wait()
        statuses = []
        for round_ in range(replays):
            for number in range(offset, keys, 4):
                item = replace(claims[number], lease_token=f"lease-{offset}-{round_}")
                if round_ % 2:
                    [result] = await store.batches.claim_operations([item])
                else:
                    result = await store.operations.claim_operation(item)
                statuses.append(result.status)
        return statuses

    tasks = [asyncio.create_task(collector())]
    tasks += [asyncio.create_task(replayer(offset)) for offset in range(4)]
    start.set()
    collected, *answers = await asyncio.gather(*tasks)

    statuses = [status for answer in answers for status in answer]
    assert collected == keys
    assert set(statuses) <= {"exists", "collected"}
    assert "collected" in statuses
    assert await operation_count(database) == 0
    assert await tombstone_count(database) == keys


# --- reissueOperations: a claim by another path ------------------------------------------------


async def reissued_and_collected(store, clock, **envelope):
    """A failed operation ``op-1`` reissued, its reissue failed too, both collected; then the
    original's tombstone expired and ``op-1`` claimed again with ``envelope`` and failed,
    while the reissue's tombstone is still kept. Returns the new ``op-1`` (failed)."""
    original = await terminal_operation(store, "failed")
    [reissue] = await store.operator.reissue_operations(OperationFilter(connector_name="calendar"))
    [leased] = await store.leasing.lease_operations("lease-W", LEASE_MS)
    assert leased.operation_id == reissue.operation_id
    assert await store.operations.record_operation(
        transition(leased, to_state="failed", lease_token="lease-W")
    )
    clock.advance(1000)
    assert await collect_all(store, clock.now) == 2
    await store.db.write_all(
        sa.delete(operation_tombstone)
        .where(operation_tombstone.c.key_digest == key_digest(CALLER, original.operation_id))
        .returning(operation_tombstone.c.collected_at)
    )
    return await terminal_operation(store, "failed", **envelope)


async def test_reissue_operations__a_collected_reissue_is_not_made_again(store, clock):
    again = await reissued_and_collected(store, clock)
    clock.advance(1000)

    before = await store.operator.count_reissue(OperationFilter(connector_name="calendar"))
    made = await store.operator.reissue_operations(OperationFilter(connector_name="calendar"))
    linked = await store.operations.get_operation(CALLER, "op-1")
    later = await store.operator.reissue_operations(OperationFilter(connector_name="calendar"))
    after = await store.operator.count_reissue(OperationFilter(connector_name="calendar"))

    key = reissue_key(CALLER, "op-1")
    assert made == [] and later == []
    assert await store.operations.get_operation(CALLER, key) is None
    assert linked is not None
    assert (linked.reissued_as, linked.updated_at) == (key, clock.now)
    assert linked.version == again.version
    assert (before.blocked, before.remaining, after.remaining) == (0, 1, 0)


async def test_count_reissue__an_original_collected_while_counting_is_left_out(
    store, clock, monkeypatch
):
    # The count reads outside any transaction: the original of a collected reissue may be
    # collected between the read of its key and the comparison with the tombstone.
    await reissued_and_collected(store, clock)
    find = operator_module.find_tombstones

    async def collected_meanwhile(db, digests):
        found = await find(db, digests)
        await store.db.write_all(
            sa.delete(operation)
            .where(operation.c.operation_id == "op-1")
            .returning(operation.c.operation_id)
        )
        return found

    monkeypatch.setattr(operator_module, "find_tombstones", collected_meanwhile)

    counted = await store.operator.count_reissue(OperationFilter(connector_name="calendar"))

    assert counted == ReissueCounts(cancelled=0, outcome_unknown=0, blocked=0, remaining=0)


async def test_reissue_operations__a_collected_reissue_of_another_envelope_is_left(store, clock):
    await reissued_and_collected(store, clock, payload_hash="sha256:changed")

    made = await store.operator.reissue_operations(OperationFilter(connector_name="calendar"))
    original = await store.operations.get_operation(CALLER, "op-1")
    left = await store.operator.count_reissue(OperationFilter(connector_name="calendar"))

    assert made == []
    assert await store.operations.get_operation(CALLER, reissue_key(CALLER, "op-1")) is None
    assert original is not None and original.reissued_as is None
    assert (left.blocked, left.remaining) == (1, 0)


async def test_reissue_operations__a_key_collected_with_another_envelope_fills_no_limit(
    store, clock
):
    await reissued_and_collected(store, clock, payload_hash="sha256:changed")
    await terminal_operation(store, "failed", operation_id="op-2", source_id="evt-2")
    where = OperationFilter(connector_name="calendar")

    made = await store.operator.reissue_operations(where, limit=1)

    assert [record.operation_id for record in made] == [reissue_key(CALLER, "op-2")]
    assert await store.operator.count_reissue(where) == ReissueCounts(
        cancelled=0, outcome_unknown=0, blocked=1, remaining=0
    )


async def test_reissue_operations__collected_reissues_take_no_place_from_the_others(store, clock):
    await reissued_and_collected(store, clock)
    await terminal_operation(store, "failed", operation_id="op-2", source_id="evt-2")

    made = await store.operator.reissue_operations(OperationFilter(connector_name="calendar"))

    assert [record.operation_id for record in made] == [reissue_key(CALLER, "op-2")]
