"""Provider accounts: a connector's account, shared by every owner that names it, with a cap on its
live leases, a throttle and a pause (docs/worker-protocol.md, 'Accounts: caps and throttles'); no
seed counterpart.

An account's row is created the first time a claim names it (``ensure``, in the claim's own
statement or transaction; a claim writes no account row that exists, but a claim of a capped
account on PostgreSQL locks it first, ``store.claims``), or by
``set_account_limit``/``throttle_account`` or a pause (``store.pauses``). Every path that takes a
lease of a capped account locks its row first by writing it unchanged (``touch``), so in-flight
counts taken after the lock are exact, and a ``leaseOperations`` statement that began before that
write sees the account as changed and leases none of it (``store.leasing``). The pause itself is a
guard of ``store.lease_guards`` (``unpaused``).
"""

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store import lease_guards as guards
from store import validation as check
from store.context import StoreContext
from store.database import Row
from store.pages import read_limit
from store.records import ACCOUNT_FIELDS, AccountLoad, AccountRecord
from store.statements import Prepared, param
from store.tables import account, paused_connector
from store.tombstones import NOT_COLLECTED

MAX_RETRY_AFTER_MS = 86_400_000
"""The longest throttle, in ms: one day."""

DEFAULT_LIST_LIMIT = 100

ACCOUNT_KEY = sa.and_(
    account.c.connector_name == param("p_connector_name", account.c.connector_name),
    account.c.account_key == param("p_account_key", account.c.account_key),
)
"""One account, its key as the parameters ``p_connector_name`` and ``p_account_key``."""

ACCOUNT_PKEY = [account.c.connector_name, account.c.account_key]


def ensure(insert: Any, rows: sa.Select[Any], lock: bool) -> Any:
    """``insert`` of the accounts ``rows`` selects (``connector_name``, ``account_key``,
    ``updated_at``) that are absent (no cap, no throttle); with ``lock`` (PostgreSQL), an
    account that exists is written unchanged instead, as ``touch`` does, in the same
    statement: either way the row is locked until the transaction ends (a concurrent
    claimant of an account being created waits for its creator's commit, then writes it).
    Returns the accounts' keys."""
    insert = insert(account).from_select(["connector_name", "account_key", "updated_at"], rows)
    if lock:
        insert = insert.on_conflict_do_update(
            index_elements=ACCOUNT_PKEY, set_={"max_in_flight": account.c.max_in_flight}
        )
    else:
        insert = insert.on_conflict_do_nothing(index_elements=ACCOUNT_PKEY)
    return insert.returning(account.c.account_key)


CLAIMED_ACCOUNT = sa.select(
    param("p_connector_name", account.c.connector_name),
    param("p_account_key", account.c.account_key),
    param("p_updated_at", account.c.updated_at),
)
"""A claim's account, its key as the parameters ``p_connector_name`` and ``p_account_key``."""

ENSURE_ACCOUNT = Prepared(
    lambda insert: ensure(insert, CLAIMED_ACCOUNT.where(NOT_COLLECTED), lock=False)
)
"""A claim's account (SQLite, whose transaction holds the write lock): create its row unless
it exists or the claim's key was collected (``NOT_COLLECTED``, ``p_key_digest``), so such a
claim writes nothing."""


def touch(where: sa.ColumnElement[bool]) -> sa.Update:
    """Write the accounts ``where`` names unchanged (PostgreSQL): the update locks each row
    until the transaction ends, and its new version tells a leaser whose snapshot is older
    that its in-flight counts of the account are stale (``store.leasing``)."""
    return (
        sa.update(account)
        .where(where)
        .values(max_in_flight=account.c.max_in_flight)
        .returning(account.c.account_key)
    )


def _with_in_flight(now: Any) -> sa.Select[Any]:
    """Accounts with their live leases at ``now`` (``in_flight``) and whether they are
    paused, on their own or with their connector (``paused``)."""
    connector_paused = sa.exists().where(
        paused_connector.c.connector_name == account.c.connector_name
    )
    return sa.select(
        *(account.c[name] for name in ACCOUNT_FIELDS),
        guards.in_flight(account.c, now).label("in_flight"),
        sa.or_(account.c.paused_at.is_not(None), connector_paused).label("paused"),
    )


READ_ACCOUNT = Prepared(
    lambda _: _with_in_flight(param("p_now", account.c.updated_at)).where(ACCOUNT_KEY)
)
"""One account and its live leases at ``p_now``."""


def _upsert(column: str) -> Prepared:
    def build(insert: Any) -> Any:
        values = {
            "connector_name": param("p_connector_name", account.c.connector_name),
            "account_key": param("p_account_key", account.c.account_key),
            column: param(f"p_{column}", account.c[column]),
            "updated_at": param("p_updated_at", account.c.updated_at),
        }
        upsert = insert(account).values(values)
        return upsert.on_conflict_do_update(
            index_elements=[account.c.connector_name, account.c.account_key],
            set_={column: upsert.excluded[column], "updated_at": upsert.excluded.updated_at},
        ).returning(account.c.account_key)

    return Prepared(build)


SET_LIMIT = _upsert("max_in_flight")
"""``set_account_limit``'s upsert."""
THROTTLE = _upsert("throttled_until")
"""``throttle_account``'s and ``lift_throttle``'s upsert (``p_throttled_until`` None lifts it)."""
PAUSE = _upsert("paused_at")
"""``store.pauses``' upsert of an account's own pause (``p_paused_at`` None ends it)."""


@dataclass(frozen=True)
class ConnectorPause:
    """A connector known to the accounts (``list_connectors``): its name, and since when it
    is paused as a whole (epoch ms; None when it is not)."""

    connector_name: str
    paused_at: int | None


class AccountsStore:
    """Caps and throttles of provider accounts."""

    def __init__(self, context: StoreContext) -> None:
        self._ctx = context
        self._db = context.db

    async def set_account_limit(
        self, connector_name: str, account_key: str, max_in_flight: int | None
    ) -> AccountLoad:
        """Cap the live leases of the account at ``max_in_flight`` (None clears the cap),
        creating its row if absent, and return it with its live leases now. Leases already
        held stay: a cap below them lets no new lease through until enough end. An upsert,
        then a read. Raises ``InvalidInput`` naming ``connectorName``, ``accountKey`` or
        ``maxInFlight`` (0 to 2^31-1)."""
        params = {
            "p_connector_name": check.key("connectorName", connector_name),
            "p_account_key": check.key("accountKey", account_key),
            "p_max_in_flight": None
            if max_in_flight is None
            else check.count("maxInFlight", max_in_flight),
            "p_updated_at": self._ctx.clock(),
        }
        await self._db.write_prepared(SET_LIMIT, params)
        return await self.read_account(params)

    async def throttle_account(
        self, connector_name: str, account_key: str, retry_after_ms: int
    ) -> AccountLoad:
        """Stop leasing for the account until the store's now + ``retry_after_ms`` (1 to
        86,400,000 ms; a provider's 429 with Retry-After), creating its row if absent, and
        return it with its live leases now. A later throttle replaces the earlier one's time.
        An upsert, then a read. Raises ``InvalidInput`` naming ``connectorName``,
        ``accountKey`` or ``retryAfterMs``."""
        retry = check.count("retryAfterMs", retry_after_ms, minimum=1, maximum=MAX_RETRY_AFTER_MS)
        now = self._ctx.clock()
        params = {
            "p_connector_name": check.key("connectorName", connector_name),
            "p_account_key": check.key("accountKey", account_key),
            "p_throttled_until": now + retry,
            "p_updated_at": now,
        }
        await self._db.write_prepared(THROTTLE, params)
        return await self.read_account(params)

    async def lift_throttle(self, connector_name: str, account_key: str) -> AccountLoad:
        """End the account's throttle now (its ``throttled_until`` cleared: it is leased again
        as its cap and pauses allow), creating its row if absent, and return it with its live
        leases now. An upsert, then a read. Raises ``InvalidInput`` naming ``connectorName`` or
        ``accountKey``."""
        params = {
            "p_connector_name": check.key("connectorName", connector_name),
            "p_account_key": check.key("accountKey", account_key),
            "p_throttled_until": None,
            "p_updated_at": self._ctx.clock(),
        }
        await self._db.write_prepared(THROTTLE, params)
        return await self.read_account(params)

    async def read_account(self, params: dict[str, Any]) -> AccountLoad:
        """The account at ``p_connector_name``/``p_account_key`` (parameters, checked) and its
        live leases now; it must exist."""
        return _load(
            await self._db.fetch_prepared(READ_ACCOUNT, {"p_now": self._ctx.clock()} | params)
        )

    async def list_accounts(
        self, connector_name: str, *, after: str | None = None, limit: int = DEFAULT_LIST_LIMIT
    ) -> list[AccountLoad]:
        """The accounts of ``connector_name`` in ``account_key`` order (byte-wise), after the
        account key ``after``, at most ``limit`` (1 to 501: a page and one to tell whether more
        follow, ``store.pages``), each with its live leases now
        (``in_flight``). One statement. Raises ``InvalidInput`` naming ``connectorName``,
        ``after`` or ``limit``."""
        query = (
            _with_in_flight(self._ctx.clock())
            .where(account.c.connector_name == check.key("connectorName", connector_name))
            .order_by(account.c.account_key)
            .limit(read_limit(limit))
        )
        if after is not None:
            query = query.where(account.c.account_key > check.key("after", after))
        return [_load(row) for row in await self._db.fetch_all(query)]

    async def list_connectors(self) -> list[ConnectorPause]:
        """Every connector that has an account or is paused as a whole, by name, each with
        since when it is paused as a whole (``paused_at``, epoch ms; None when it is not).
        One statement."""
        names = sa.union(
            sa.select(account.c.connector_name), sa.select(paused_connector.c.connector_name)
        ).subquery()
        query = (
            sa.select(names.c.connector_name, paused_connector.c.paused_at)
            .select_from(
                names.outerjoin(
                    paused_connector, paused_connector.c.connector_name == names.c.connector_name
                )
            )
            .order_by(names.c.connector_name)
        )
        return [
            ConnectorPause(connector_name=row["connector_name"], paused_at=row["paused_at"])
            for row in await self._db.fetch_all(query)
        ]


def _load(row: Row | None) -> AccountLoad:
    assert row is not None, "read after its upsert"
    return AccountLoad(
        account=AccountRecord.from_row(row),
        in_flight=int(row["in_flight"]),
        paused=bool(row["paused"]),
    )
