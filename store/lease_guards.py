"""The guards every path that takes a lease or a watch's claim applies (docs/worker-protocol.md,
'The leasing guard'), written once.

A live lease is one on an attempted operation that has not lapsed (``lease_expires_at >=
now``, epoch ms): what an account's cap counts and what the one-lease-per-entity rule
forbids twice. An operation may take a lease (``lease_allowed``) when its account is neither
paused (on its own or with its whole connector: ``unpaused``) nor throttled (both asked at
once: ``open_account``), below its cap, and it is the oldest attempted operation of its
provider entity (the watch identity) with no other operation of the entity holding a live
lease. A paused account's watches are claimed by no verifier and its operations and watches
are left out of the due lists: those predicates (``store.operations.due_operation``,
``store.retention``, ``store.watches.due_watch``) apply ``unpaused`` too.
``store.leasing`` (``leaseOperations``), ``acquire_lease`` and ``claim_operation``
(``store.operations``) and ``claim_operations`` (``store.batches``) build their statements
from these; each takes a value or a ``param``
for ``now``, and a ``subject`` whose attributes name the operation's identity columns (the
operation table's ``c`` collection, or the parameters of a claim's new row).
"""

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from store.records import ATTEMPTED, WATCH_IDENTITY
from store.tables import account, paused_connector
from store.tables import operation as op

ORDER_COLUMNS = ("created_at", "caller_did", "operation_id")
"""The claim order of operations (``listTrackedOperations``): which of an entity's is oldest."""

ENTITY_ORDER = (*WATCH_IDENTITY, *ORDER_COLUMNS)
"""The columns of the entity index (``kubun_connector_operation_entity_idx``), in order: the
entity, then the claim order."""


def live(table: Any = op) -> sa.ColumnElement[bool]:
    """State attempted, as a literal so the planner can match the partial indexes on live
    operations."""
    state: sa.ColumnElement[bool] = table.c.state == sa.literal_column(f"'{ATTEMPTED}'")
    return state


def lease_held(now: Any, table: Any = op) -> sa.ColumnElement[bool]:
    """The lease is held and has not lapsed at ``now`` (whatever the state: a finalize keeps
    its lease)."""
    return sa.and_(table.c.lease_token.is_not(None), table.c.lease_expires_at >= now)


def live_lease(now: Any, table: Any = op) -> sa.ColumnElement[bool]:
    """An attempted operation whose lease is held and has not lapsed at ``now``."""
    return sa.and_(live(table), lease_held(now, table))


def _same_account(table: Any, subject: Any) -> sa.ColumnElement[bool]:
    return sa.and_(
        table.c.connector_name == subject.connector_name,
        table.c.account_key == subject.account_key,
    )


def _other_of_entity(subject: Any, key: tuple[Any, Any] | None) -> tuple[Any, list[Any]]:
    """An alias of operations and the conditions naming the live operations of ``subject``'s
    entity other than ``key`` (the subject's own key; None for a row not yet written)."""
    other = op.alias("entity_other")
    conditions: list[Any] = [live(other)]
    conditions += [other.c[name] == getattr(subject, name) for name in WATCH_IDENTITY]
    if key is not None:
        conditions.append(sa.tuple_(other.c.caller_did, other.c.operation_id) != sa.tuple_(*key))
    return other, conditions


def probe(table: Any, *conditions: Any) -> sa.Exists:
    """Some row of ``table`` meets ``conditions``: ``EXISTS`` as an index probe per outer row.
    ``OFFSET 0`` keeps PostgreSQL from turning the ``EXISTS`` into a hashed subplan, which
    reads every row that meets the uncorrelated conditions (every live lease of the table,
    say) once per statement, so the statement's cost would grow with the table, not with its
    own rows (``tests/store/test_query_plans.py``)."""
    return sa.select(sa.literal(1)).select_from(table).where(*conditions).offset(0).exists()


def unpaused(subject: Any) -> sa.ColumnElement[bool]:
    """``subject``'s account is not paused: neither on its own (``paused_at`` set) nor with
    its whole connector (a ``paused_connector`` row). ``subject``'s attributes name
    ``connector_name`` and ``account_key`` (an operation's or a watch's columns). Two
    ``NOT EXISTS`` side by side, which PostgreSQL plans as anti-joins that keep an index
    walk's order (``tests/store/test_query_plans.py``)."""
    return sa.and_(
        ~sa.exists().where(_same_account(account, subject), account.c.paused_at.is_not(None)),
        _connector_unpaused(subject),
    )


def _connector_unpaused(subject: Any) -> sa.ColumnElement[bool]:
    """``subject``'s connector is not paused as a whole (no ``paused_connector`` row)."""
    return ~sa.exists().where(paused_connector.c.connector_name == subject.connector_name)


def open_account(subject: Any, now: Any) -> sa.ColumnElement[bool]:
    """``subject``'s account is neither paused (``unpaused``) nor throttled at ``now``
    (``throttled_until > now``): one probe of its account row for both (``paused_at`` set
    or the throttle), beside its connector's pause; what ``unpaused`` and a throttle probe
    side by side would ask in two."""
    shut = sa.or_(account.c.paused_at.is_not(None), account.c.throttled_until > now)
    return sa.and_(
        ~sa.exists().where(_same_account(account, subject), shut), _connector_unpaused(subject)
    )


def in_flight(subject: Any, now: Any, but: tuple[Any, Any] | None = None) -> Any:
    """How many live leases ``subject``'s account holds at ``now`` (a scalar subquery),
    not counting the operation at ``but``. Correlated to ``subject``'s table however deep it
    sits (``at_cap`` inside ``acquire_lease``'s ``UPDATE``), never a second, uncorrelated
    copy of it that would count every account's leases."""
    leased = op.alias("leased")
    query = (
        sa.select(sa.func.count())
        .where(_same_account(leased, subject), live_lease(now, leased))
        .correlate_except(leased)
    )
    if but is not None:
        query = query.where(
            sa.tuple_(leased.c.caller_did, leased.c.operation_id) != sa.tuple_(*but)
        )
    return query.scalar_subquery()


def with_room(
    subject: sa.FromClause, now: Any, caps: sa.FromClause | None = None
) -> tuple[sa.Join, sa.ColumnElement[Any]]:
    """``subject`` (rows naming ``connector_name`` and ``account_key``) outer-joined to its
    account's cap, and that account's room at ``now``: its cap less its live leases
    (``in_flight``), null when it has no cap. What a batch that hands out leases ranks its
    rows of one account against. The cap is read from ``caps`` when given (rows naming
    ``connector_name``, ``account_key`` and ``max_in_flight``, holding at least every
    capped account of ``subject``'s: ``capped_accounts``), else from the account table."""
    capped = account.alias("capped") if caps is None else caps
    joined = subject.outerjoin(capped, _same_account(capped, subject.c))
    room = sa.case(
        (capped.c.max_in_flight.is_(None), None),
        else_=capped.c.max_in_flight - in_flight(subject.c, now),
    )
    return joined, room


def capped_accounts(subject: sa.FromClause) -> sa.CTE:
    """The accounts of ``subject``'s rows (naming ``connector_name`` and ``account_key``)
    that have a cap, with it (``max_in_flight``): one probe of each row's account, read once
    by ``with_room`` and by whatever locks them, so an uncapped account costs no more."""
    capped = account.alias("capped")
    wanted = sa.select(subject.c.connector_name, subject.c.account_key)
    return (
        sa.select(capped.c.connector_name, capped.c.account_key, capped.c.max_in_flight)
        .where(
            capped.c.max_in_flight.is_not(None),
            sa.tuple_(capped.c.connector_name, capped.c.account_key).in_(wanted),
        )
        .cte("caps")
    )


def at_cap(subject: Any, now: Any, but: tuple[Any, Any] | None = None) -> sa.ColumnElement[bool]:
    """``subject``'s account has a cap and its live leases (but ``but``'s) reach it."""
    return sa.exists().where(
        _same_account(account, subject),
        account.c.max_in_flight.is_not(None),
        account.c.max_in_flight <= in_flight(subject, now, but),
    )


def entity_taken(subject: Any, now: Any, key: tuple[Any, Any] | None) -> sa.ColumnElement[bool]:
    """Another live operation of ``subject``'s entity holds a live lease at ``now``."""
    other, conditions = _other_of_entity(subject, key)
    return probe(other, *conditions, live_lease(now, other))


def older_in_entity(subject: Any, key: tuple[Any, Any] | None) -> sa.ColumnElement[bool]:
    """``subject`` is not the oldest attempted operation of its entity (by claim order); for
    a row not yet written (``key`` None), the entity has any attempted operation at all.

    On PostgreSQL asked of the first attempted operation at or after the subject's entity in
    the entity index's order (one row: the entity's oldest when the entity has any): an
    ordered read of that index that stops at its first row, so no other plan is cheap
    whatever the planner guesses of the rows. Asked column by column, an index on the
    account's columns serves the equalities too, and a planner that thinks an account's
    live rows few (statistics older than a burst) reads every live row of the account for
    each subject. SQLite, which reads a correlated subquery in FROM by sorting, is asked
    column by column: it reads the entity index for the equalities."""
    return by_backend(_older_first(subject, key), _older_any(subject, key))


def _older_any(subject: Any, key: tuple[Any, Any] | None) -> sa.ColumnElement[bool]:
    """``older_in_entity`` as an ``EXISTS`` over the entity's columns (SQLite)."""
    other, conditions = _other_of_entity(subject, key)
    if key is not None:
        order = [getattr(subject, name) for name in ORDER_COLUMNS]
        conditions.append(sa.tuple_(*(other.c[n] for n in ORDER_COLUMNS)) < sa.tuple_(*order))
    return sa.exists().where(*conditions)


def _older_first(subject: Any, key: tuple[Any, Any] | None) -> sa.ColumnElement[bool]:
    """``older_in_entity`` asked of the entity's first attempted operation (PostgreSQL)."""
    other = op.alias("entity_first_of")
    entity = [getattr(subject, name) for name in WATCH_IDENTITY]
    in_order = [other.c[name] for name in ENTITY_ORDER]
    first = (
        sa.select(*in_order)
        .where(live(other), sa.tuple_(*in_order[: len(entity)]) >= sa.tuple_(*entity))
        .order_by(*in_order)
        .limit(1)
        # The subject's columns name the statement's row, not a table of the subquery's own.
        .correlate_except(other)
        .subquery("entity_first")
    )
    conditions = [
        first.c[name] == value for name, value in zip(WATCH_IDENTITY, entity, strict=True)
    ]
    if key is not None:
        order = [getattr(subject, name) for name in ORDER_COLUMNS]
        conditions.append(sa.tuple_(*(first.c[n] for n in ORDER_COLUMNS)) < sa.tuple_(*order))
    return sa.exists().select_from(first).where(*conditions)


class by_backend(FunctionElement[Any]):
    """One condition written two ways: the first for PostgreSQL, the second for SQLite.
    Untyped, so SQLite (no boolean type) does not compare it with 1, which would hide its
    comparisons from the planner."""

    type: Any = sa.types.NullType()
    inherit_cache = True
    name = "by_backend"


@compiles(by_backend)
def _by_backend(element: by_backend, compiler: SQLCompiler, **kw: Any) -> str:
    return str(compiler.process(element.clauses.clauses[0], **kw))


@compiles(by_backend, "sqlite")
def _by_backend_sqlite(element: by_backend, compiler: SQLCompiler, **kw: Any) -> str:
    return str(compiler.process(element.clauses.clauses[1], **kw))


def lease_allowed(
    subject: Any, now: Any, key: tuple[Any, Any] | None, *, cap: bool = True
) -> sa.ColumnElement[bool]:
    """``subject`` (the operation at ``key``, or a claim's new row when None) may take a
    lease at ``now``: its account is neither paused nor throttled nor at its cap (its own
    lease not counted; ``cap`` False leaves the cap to the caller), it is the oldest
    attempted operation of its entity, and no other operation of the entity holds a live
    lease."""
    guards = [
        open_account(subject, now),
        sa.not_(older_in_entity(subject, key)),
        sa.not_(entity_taken(subject, now, key)),
    ]
    if cap:
        guards.insert(1, sa.not_(at_cap(subject, now, key)))
    return sa.and_(*guards)


def own_key() -> tuple[Any, Any]:
    """The key of the operation a statement over ``operation`` is deciding (its own row)."""
    return (op.c.caller_did, op.c.operation_id)
