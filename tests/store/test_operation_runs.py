"""The dashboard's filters of operations, on both backends: where the ATTEMPTED operations
stand now (``OperationFilter.run``: leased, due, scheduled, deferred) and a search that
forgives (``OperationFilter.search``), in the lists, their counts and the bulk writes."""

import pytest

from store.errors import InvalidInput
from store.operations import OperationFilter
from tests.factories import LEASE_MS, claimed_operation, committed_operation


async def four_runs(store):
    """One ATTEMPTED operation standing in each run, and a committed one."""
    now = store.clock()
    await claimed_operation(store, operation_id="leased", source_id="evt-1")
    await claimed_operation(store, operation_id="due", source_id="evt-2", lease_expires_at=now - 1)
    for operation_id, reason in [("scheduled", None), ("deferred", "offline")]:
        await claimed_operation(
            store,
            operation_id=operation_id,
            source_id=f"evt-{operation_id}",
            lease_expires_at=now - 1,
        )
        deferred = await store.operations.defer_operation(
            "did:key:caller", operation_id, now + LEASE_MS, reason
        )
        assert deferred is not None
    await committed_operation(store, operation_id="done", source_id="evt-done")


@pytest.mark.parametrize("run", ["leased", "due", "scheduled", "deferred"])
async def test_run__each_attempted_operation_stands_in_one(store, run):
    await four_runs(store)
    where = OperationFilter(run=run)

    listed = await store.operations.list_tracked_operations(where)

    assert [record.operation_id for record in listed] == [run]
    assert await store.operations.count_tracked_operations(where) == 1


async def test_run__a_lapsing_lease_makes_it_due(store, clock):
    await four_runs(store)
    clock.advance(LEASE_MS + 1)

    due = await store.operations.list_tracked_operations(OperationFilter(run="due"))

    assert sorted(record.operation_id for record in due) == [
        "deferred",
        "due",
        "leased",
        "scheduled",
    ]


async def test_run__cancel_the_leased_operations_of_an_account(store):
    await four_runs(store)

    cancelled = await store.operator.cancel_operations(
        OperationFilter(run="leased", account_key="acct-1")
    )

    assert [record.operation_id for record in cancelled] == ["leased"]


async def test_run__an_unknown_run_names_the_field(store):
    with pytest.raises(InvalidInput) as raised:
        await store.operations.list_tracked_operations(OperationFilter(run="running"))

    assert raised.value.field == "run"


@pytest.mark.parametrize(
    ("search", "found"),
    [
        ("7F3a", ["op-7f3a9c"]),
        ("events/ABC", ["op-target"]),
        ("Evt-Src", ["op-source"]),
        ("op-", ["op-7f3a9c", "op-source", "op-target"]),
        ("50%_off", ["op-50%_off"]),
        ("5_%off", []),
    ],
)
async def test_search__a_part_of_the_id_target_or_source_in_any_case(store, search, found):
    await committed_operation(store, operation_id="op-7f3a9c", source_id="evt-1")
    await committed_operation(
        store, operation_id="op-target", source_id="evt-2", target="events/abc-1"
    )
    await committed_operation(store, operation_id="op-source", source_id="EVT-SRC-9")
    await committed_operation(store, operation_id="op-50%_off", source_id="evt-4")
    where = OperationFilter(search=search)

    listed = await store.operations.list_tracked_operations(where)

    assert sorted(record.operation_id for record in listed) == sorted(
        found if search != "op-" else [*found, "op-50%_off"]
    )


async def test_search__empty_names_the_field(store):
    with pytest.raises(InvalidInput) as raised:
        await store.operations.count_tracked_operations(OperationFilter(search=""))

    assert raised.value.field == "search"
