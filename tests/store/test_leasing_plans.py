"""leaseOperations' choice on PostgreSQL walks indexes, never the whole operations table:
EXPLAIN over 50,000 analyzed rows (10% live, many owners)."""

import re

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect

from benchmarks.seed import seed_statements
from store.batches import CLAIM_OPERATIONS
from store.database import Database
from store.dialects import POSTGRESQL
from store.leasing import HEAD, _chosen, _prepared_lease, _ranked_by_owner, _ranked_head
from store.operations import CLAIM_COLUMNS

ROWS = 50_000
NOW = 1_800_000_000_000


async def plan_of_choice(database: Database, ranked: sa.Subquery, fresh: bool = True) -> str:
    """The plan of ``_chosen`` over ``ranked`` (100 rows at ``NOW``), its values inlined, over
    the seeded rows: analyzed when ``fresh``, else with the statistics of the empty table."""
    statements = seed_statements(True, ROWS, NOW)
    if not fresh:
        statements = ["ANALYZE", *(s for s in statements if s != "ANALYZE")]
    for statement in statements:
        await database.write_all(sa.text(statement))
    query, _ = _chosen(NOW, 100, ranked, ("t", 1), True)
    sql = str(
        query.compile(
            dialect=sa.dialects.postgresql.dialect(), compile_kwargs={"literal_binds": True}
        )
    )
    rows = await database.fetch_all(sa.text("EXPLAIN " + sql))
    return "\n".join(str(row[0]) for row in rows)


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "stale"])
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_plan__lease_operations_walks_each_accounts_due_indexes(
    database: Database, fresh: bool
):
    """Whether the statistics hold the seeded rows or predate them, each account's walk
    reads its due indexes in order up to the depth, never sorting an owner's rows."""
    plan = await plan_of_choice(database, _ranked_by_owner(NOW, (None, None, None), 4), fresh)

    assert not re.search(r"Seq Scan on kubun_connector_operation\b", plan), plan
    assert "Index Scan using kubun_connector_operation_account_due_new_idx" in plan, plan
    assert "Index Scan using kubun_connector_operation_account_due_next_idx" in plan, plan
    assert "kubun_connector_operation_owner_idx" not in plan, plan
    assert "hashed SubPlan" not in plan, plan


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_plan__lease_operations_reads_the_head_of_both_due_indexes(database: Database):
    plan = await plan_of_choice(database, _ranked_head(NOW, (None, None, None), 800, 100))

    assert not re.search(r"Seq Scan on kubun_connector_operation\b", plan), plan
    assert "kubun_connector_operation_due_new_idx" in plan
    # The deferred side in next-attempt order, by either index that leads with it.
    assert re.search(r"Index Scan using kubun_connector_operation_(due_next|state_due)_idx", plan)
    assert "Merge Append" in plan, plan
    assert "hashed SubPlan" not in plan, plan


def literal(value: object) -> str:
    """``value`` (None, a bool, an int or a str) as an SQL literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool | int):
        return str(value).lower()
    return "'" + str(value).replace("'", "''") + "'"


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_plan__lease_operations_head_as_a_generic_plan_reads_the_due_indexes_in_order(
    database: Database, database_url: str
):
    """The head's statement as the store runs it, prepared, planned without its values
    (PostgreSQL takes this generic plan after five runs): still both due indexes read in
    due order, each stopping at its limit."""
    for statement in seed_statements(True, ROWS, NOW):
        await database.write_all(sa.text(statement))
    values = {
        "p_now": NOW,
        "p_token": "t",
        "p_expires": NOW + 60_000,
        "p_size": 100,
        "p_depth": 800,
        "p_connector": None,
        "p_caller": None,
        "p_max_bytes": None,
        "p_actor": None,
    }
    sql, arguments = _prepared_lease(HEAD, False, False, False, True).bind(
        asyncpg_dialect(), values
    )
    connection = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        await connection.execute("SET plan_cache_mode = force_generic_plan")
        await connection.execute("PREPARE lease AS " + sql)
        execute = "EXPLAIN EXECUTE lease(" + ", ".join(map(literal, arguments)) + ")"
        plan = "\n".join(row[0] for row in await connection.fetch(execute))
    finally:
        await connection.close()

    assert not re.search(r"Seq Scan on kubun_connector_operation\b", plan), plan
    assert "Index Scan using kubun_connector_operation_due_new_idx" in plan, plan
    assert re.search(r"Index Scan using kubun_connector_operation_(due_next|state_due)_idx", plan)
    assert "Merge Append" in plan, plan


def claim_items(count: int) -> list[dict]:
    """``count`` fresh claims' rows, each its own provider entity of the seeded account."""
    return [
        {name: None for name in CLAIM_COLUMNS}
        | {
            "caller_did": "did:plan:caller",
            "operation_id": f"new-{n}",
            "node_key": f"node-new-{n}",
            "owner_did": f"did:seed:owner-{n % 7}",
            "connector_name": "seed",
            "model": "CalendarEvent",
            "op": "create",
            "account_key": "account",
            "target": "t",
            "source_id": f"source-new-{n}",
            "deterministic_event_id": f"event-new-{n}",
            "payload_hash": "sha256:0",
            "reissue_intent": "null",
            "state": "attempted",
            "attempts": 0,
            "version": 0,
            "incarnation": "plan",
            "lease_token": "plan",
            "lease_expires_at": NOW + 30_000,
            "created_at": NOW,
            "updated_at": NOW,
        }
        for n in range(count)
    ]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_plan__claim_operations_probes_the_entity_guards_per_item(
    database: Database, database_url: str
):
    """With thousands of live leases, the guards of a batch of claims are index probes per
    item, never a hashed subplan that reads every live lease (``lease_guards.probe``)."""
    for statement in seed_statements(True, ROWS, NOW):
        await database.write_all(sa.text(statement))
    await database.write_all(
        sa.text(
            "UPDATE kubun_connector_operation SET lease_token = 'held', lease_expires_at = "
            f"{NOW + 60_000} WHERE state = 'attempted'"
        )
    )
    await database.write_all(sa.text("ANALYZE"))
    prepared, values = CLAIM_OPERATIONS.bind(POSTGRESQL, claim_items(50), p_now=NOW, p_actor=None)
    sql, arguments = prepared.bind(asyncpg_dialect(), values)
    connection = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        plan = "\n".join(row[0] for row in await connection.fetch("EXPLAIN " + sql, *arguments))
    finally:
        await connection.close()

    assert "hashed SubPlan" not in plan, plan
    assert "kubun_connector_operation_entity_idx" in plan, plan
