"""Bulk rows for plan tests and size benchmarks: one ``INSERT … SELECT`` per table over
``generate_series`` (PostgreSQL) or a recursive CTE (SQLite).

Of ``rows`` operations, 1 in 10 is live (``attempted``; half of those never deferred, half
with a next attempt spread over the past, so all of them due), the rest committed; each
operation is its own provider entity, and the operations go round ``owners`` owners ten at a
time (``(i / 10) % owners``), so every owner has live ones. Of ``rows`` watches, 1 in 10 is
pending verification, the rest verified. Times are epoch ms before ``now``.

``event_statements`` adds one event per seeded operation to the operations' log, spread over
the day before ``now``: by ``i % 10`` a claim (4 in 10), a commit, a failure, a retry, or an
event the dashboard's charts do not count (3 in 10: leases, send markers).
"""

OWNERS = 50
"""The owners of the seeded operations unless a caller names another count."""

OPERATION_COLUMNS = (
    "caller_did, operation_id, node_key, owner_did, connector_name, model, op, account_key,"
    " target, source_id, deterministic_event_id, payload_hash, reissue_intent, document_id,"
    " state, attempts, next_attempt_at, version, incarnation, created_at, updated_at"
)
OPERATION_VALUES = (
    "'did:seed:caller', 'seed-' || i, 'node-seed-' || i,"
    " 'did:seed:owner-' || ((i / 10) % {owners}), 'seed', 'CalendarEvent', 'create', 'account',"
    " 'calendars/primary', 'source-' || i, 'event-' || i, 'sha256:0', 'null', 'doc-seed-' || i,"
    " CASE WHEN i % 10 = 0 THEN 'attempted' ELSE 'committed' END, 1,"
    " CASE WHEN i % 20 = 0 THEN {now} - 1000 - i ELSE NULL END,"
    " 1, 'seed', {now} - 10000000 + i, {now} - 10000000 + i"
)
WATCH_COLUMNS = (
    "owner_did, connector_name, model, account_key, source_id, document_id,"
    " repair_generation, verification_status, verification_attempts, next_attempt_at,"
    " version, created_at, updated_at"
)
WATCH_VALUES = (
    "'did:seed:owner', 'seed', 'CalendarEvent', 'account', 'source-' || i, 'doc-seed-' || i,"
    " 1, CASE WHEN i % 10 = 0 THEN 'pending_verification' ELSE 'verified' END, 0,"
    " CASE WHEN i % 10 = 0 THEN {now} - 1000 - i ELSE NULL END,"
    " 1, {now} - 10000000 + i, {now} - 10000000 + i"
)


def seed_statements(
    is_postgres: bool, rows: int, now: int, start: int = 0, owners: int = OWNERS
) -> list[str]:
    """The statements that insert ``rows`` operations of ``owners`` owners and ``rows``
    watches (numbered from ``start + 1``), then ANALYZE."""
    statements = []
    for table, columns, values in [
        ("kubun_connector_operation", OPERATION_COLUMNS, OPERATION_VALUES),
        ("kubun_connector_projection_watch", WATCH_COLUMNS, WATCH_VALUES),
    ]:
        select = values.format(now=int(now), owners=int(owners))
        if is_postgres:
            statements.append(
                f"INSERT INTO {table} ({columns}) SELECT {select}"
                f" FROM generate_series({int(start) + 1}, {int(start) + int(rows)}) AS g(i)"
            )
        else:
            statements.append(
                f"WITH RECURSIVE g(i) AS (SELECT {int(start) + 1} UNION ALL SELECT i + 1 FROM g"
                f" WHERE i < {int(start) + int(rows)})"
                f" INSERT INTO {table} ({columns}) SELECT {select} FROM g"
            )
    statements.append("ANALYZE")
    return statements


EVENT_COLUMNS = (
    "tx, caller_did, operation_id, owner_did, connector_name, account_key, at, action,"
    " to_state, attempts"
)
EVENT_VALUES = (
    "0, 'did:seed:caller', 'seed-' || i, 'did:seed:owner-' || ((i / 10) % {owners}), 'seed',"
    " 'account', {now} - 1 - ((i * 7) % 86400) * 1000,"
    " CASE i % 10 WHEN 4 THEN 'finalized' WHEN 5 THEN 'recorded' WHEN 6 THEN 'recorded'"
    " WHEN 7 THEN 'leased' WHEN 8 THEN 'send_marked' WHEN 9 THEN 'leased' ELSE 'claimed' END,"
    " CASE i % 10 WHEN 4 THEN 'committed' WHEN 5 THEN 'failed' ELSE 'attempted' END, 1"
)


def event_statements(
    is_postgres: bool, rows: int, now: int, start: int = 0, owners: int = OWNERS
) -> list[str]:
    """The statements that insert ``rows`` operation events (numbered from ``start + 1``, of
    the operations ``seed_statements`` inserts with as many ``owners``, each carrying its
    operation's owner, connector and account), then ANALYZE."""
    table = "kubun_connector_operation_event"
    select = EVENT_VALUES.format(now=int(now), owners=int(owners))
    first, last = int(start) + 1, int(start) + int(rows)
    if is_postgres:
        insert = (
            f"INSERT INTO {table} ({EVENT_COLUMNS}) SELECT {select}"
            f" FROM generate_series({first}, {last}) AS g(i)"
        )
    else:
        insert = (
            f"WITH RECURSIVE g(i) AS (SELECT {first} UNION ALL SELECT i + 1 FROM g"
            f" WHERE i < {last}) INSERT INTO {table} ({EVENT_COLUMNS}) SELECT {select} FROM g"
        )
    return [insert, "ANALYZE"]
