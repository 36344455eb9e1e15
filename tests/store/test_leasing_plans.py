"""leaseOperations' choice on PostgreSQL walks indexes, never the whole operations table:
EXPLAIN over 50,000 analyzed rows (10% live, many owners)."""

import re

import pytest
import sqlalchemy as sa

from benchmarks.seed import seed_statements
from store.database import Database
from store.leasing import _chosen, _ranked_by_owner

ROWS = 50_000
NOW = 1_800_000_000_000


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_plan__lease_operations_walks_each_owners_due_indexes(database: Database):
    for statement in seed_statements(True, ROWS, NOW):
        await database.write_all(sa.text(statement))
    query, _ = _chosen(NOW, 100, _ranked_by_owner(NOW, (None, None, None), 200), True)
    sql = str(
        query.compile(
            dialect=sa.dialects.postgresql.dialect(), compile_kwargs={"literal_binds": True}
        )
    )

    rows = await database.fetch_all(sa.text("EXPLAIN " + sql))
    plan = "\n".join(str(row[0]) for row in rows)

    assert not re.search(r"Seq Scan on kubun_connector_operation\b", plan), plan
    assert "kubun_connector_operation_owner_due_new_idx" in plan
    assert "kubun_connector_operation_owner_due_next_idx" in plan
