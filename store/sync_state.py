"""Sync state: the sync checkpoint of each (connector, owner), advanced by compare-and-swap
(the seed's ``getSyncState``, ``setSyncState``, ``deleteSyncState``,
``listSyncStatesForConnector`` and ``updateSyncProgress``).

A row carries ``version`` (+1 on each progress update) and ``incarnation`` (fresh whenever
the row is created), so a writer that read a row before it was deleted and re-created can
never land on the new one.
"""

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store import validation as check
from store.context import StoreContext
from store.errors import InvalidInput
from store.pages import read_limit
from store.records import SYNC_IDLE, SYNC_STATUSES, SyncStateRecord
from store.sizes import Measured, measured, row_bytes, sized_rows, within_bytes
from store.statements import Prepared, param
from store.tables import sync_state as ss

DEFAULT_PAGE = 50


@dataclass(frozen=True, slots=True)
class SyncProgress:
    """What a sync run reports (the fields ``set_sync_state`` and ``update_sync_progress``
    write besides the status).

    ``checkpoint`` and ``recovery``: any JSON value, or None. ``last_synced_at``: ISO-8601
    text, as the seed. ``entity_count``: 0 to 2^31-1. ``error``: a message, or None.
    """

    checkpoint: Any
    last_synced_at: str
    entity_count: int
    error: str | None = None
    recovery: Any = None

    def values(self) -> dict[str, Any]:
        """The columns, each checked; raises ``InvalidInput`` naming the field."""
        return {
            "checkpoint": check.optional_json_text("checkpoint", self.checkpoint),
            "last_synced_at": check.iso_datetime("lastSyncedAt", self.last_synced_at),
            "entity_count": check.count("entityCount", self.entity_count),
            "error": check.optional_text("error", self.error),
            "recovery": check.optional_json_text("recovery", self.recovery),
        }


def _key_params(connector_name: str, owner_did: str) -> dict[str, Any]:
    """The parameters of ``KEY``; raises ``InvalidInput`` for a bad key."""
    return {
        "p_connector_name": check.key("connectorName", connector_name),
        "p_owner_did": check.key("ownerDID", owner_did),
    }


def _params(values: dict[str, Any]) -> dict[str, Any]:
    """Column values as the parameters ``p_<column>``."""
    return {f"p_{name}": value for name, value in values.items()}


KEY = sa.and_(
    ss.c.connector_name == param("p_connector_name", ss.c.connector_name),
    ss.c.owner_did == param("p_owner_did", ss.c.owner_did),
)
"""One sync state, its key as the parameters ``p_connector_name`` and ``p_owner_did``."""
PROGRESS_COLUMNS = ("checkpoint", "last_synced_at", "entity_count", "error", "recovery")
"""The columns of ``SyncProgress.values``."""
ROW_COLUMNS = (
    "connector_name",
    "owner_did",
    *PROGRESS_COLUMNS,
    "status",
    "updated_at",
    "version",
    "incarnation",
)
"""The columns a new row is inserted with, each from the parameter ``p_<column>``."""


def _insert(insert: Any) -> Any:
    return insert(ss).values({name: param(f"p_{name}", ss.c[name]) for name in ROW_COLUMNS})


def _set_sync_state(insert: Any) -> Any:
    row = _insert(insert)
    replaced = (*PROGRESS_COLUMNS, "status", "updated_at")
    return row.on_conflict_do_update(
        index_elements=[ss.c.connector_name, ss.c.owner_did],
        set_={name: getattr(row.excluded, name) for name in replaced},
    ).returning(ss)


ROW_BYTES = row_bytes(ss.c)
"""A sync state's size in bytes (``store.sizes``)."""
GET_SYNC_STATE = Prepared(lambda _: sa.select(ss).where(KEY))
"""``get_sync_state``'s read."""
SET_SYNC_STATE = Prepared(_set_sync_state)
"""``set_sync_state``'s upsert: a new row as given, an existing one takes the progress, the
status and ``updated_at`` and keeps its version and incarnation."""
CREATE_SYNC_STATE = Prepared(
    lambda insert: (
        _insert(insert)
        .on_conflict_do_nothing(index_elements=[ss.c.connector_name, ss.c.owner_did])
        .returning(ss)
    )
)
"""``update_sync_progress``'s create-if-absent."""
UPDATE_SYNC_PROGRESS = Prepared(
    lambda _: (
        sa.update(ss)
        .where(
            KEY,
            ss.c.version == param("p_version", ss.c.version),
            ss.c.incarnation == param("p_incarnation", ss.c.incarnation),
        )
        .values(
            {name: param(f"p_{name}", ss.c[name]) for name in (*PROGRESS_COLUMNS, "updated_at")}
            | {"version": ss.c.version + 1}
        )
        .returning(ss)
    )
)
"""``update_sync_progress``'s compare-and-swap on version and incarnation."""
DELETE_SYNC_STATE = Prepared(lambda _: sa.delete(ss).where(KEY).returning(ss.c.version))
"""``delete_sync_state``'s delete."""


def _record(row: Any) -> SyncStateRecord | None:
    return None if row is None else SyncStateRecord.from_row(row)


class SyncStateStore:
    """The sync-state methods of the seed's connector store."""

    def __init__(self, context: StoreContext) -> None:
        self._ctx = context
        self._db = context.db

    async def get_sync_state(self, connector_name: str, owner_did: str) -> SyncStateRecord | None:
        """The sync state of ``(connector_name, owner_did)``, or None (seed ``getSyncState``).

        Raises ``InvalidInput`` for a bad key.
        """
        params = _key_params(connector_name, owner_did)
        return _record(await self._db.fetch_prepared(GET_SYNC_STATE, params))

    async def set_sync_state(
        self, connector_name: str, owner_did: str, progress: SyncProgress, status: str
    ) -> SyncStateRecord:
        """Upsert the sync state (seed ``setSyncState``): one ``INSERT … ON CONFLICT DO
        UPDATE … RETURNING``. A new row starts at version 0 with a fresh incarnation; an
        update writes every field of ``progress`` and ``status`` and keeps both.

        ``status``: ``idle``, ``syncing`` or ``error``. Returns the row as stored. Raises
        ``InvalidInput`` naming the field for a malformed value.
        """
        values = {
            "connector_name": check.key("connectorName", connector_name),
            "owner_did": check.key("ownerDID", owner_did),
            **progress.values(),
            "status": check.choice("status", status, SYNC_STATUSES),
            "updated_at": self._ctx.clock(),
        }
        new_row = values | {"version": 0, "incarnation": self._ctx.new_id()}
        row = await self._db.write_prepared(SET_SYNC_STATE, _params(new_row))
        assert row is not None, "an upsert always returns its row"
        return SyncStateRecord.from_row(row)

    async def delete_sync_state(self, connector_name: str, owner_did: str) -> bool:
        """Delete the sync state (seed ``deleteSyncState``). Returns whether a row was
        deleted (``DELETE … RETURNING``). Raises ``InvalidInput`` for a bad key."""
        params = _key_params(connector_name, owner_did)
        return await self._db.write_prepared(DELETE_SYNC_STATE, params) is not None

    async def list_sync_states_for_connector(
        self,
        connector_name: str,
        *,
        after: str | None = None,
        owner_did: str | None = None,
        limit: int = DEFAULT_PAGE,
        max_bytes: int | None = None,
    ) -> Measured[SyncStateRecord]:
        """The sync states of one connector ordered by owner DID (seed
        ``listSyncStatesForConnector``), each with its size, with keyset paging: ``after``
        is the last owner DID already seen, ``owner_did`` the one owner listed (a tenant's
        page), ``limit`` (1 to 501, a page and one to tell whether more follow) the most rows
        returned, ``max_bytes`` the most bytes (``store.sizes``: the rows past it are never
        sent, the first row always is, ``cut`` says more follow). Raises ``InvalidInput``
        naming the field."""
        order = (ss.c.owner_did,)
        query = (
            sa.select(ss)
            .where(ss.c.connector_name == check.key("connectorName", connector_name))
            .order_by(*order)
            .limit(read_limit(limit))
        )
        if after is not None:
            query = query.where(ss.c.owner_did > check.key("after", after))
        if owner_did is not None:
            query = query.where(ss.c.owner_did == check.key("ownerDID", owner_did))
        rows = await self._db.fetch_all(within_bytes(query, order, ROW_BYTES, max_bytes))
        return measured(sized_rows(rows, SyncStateRecord.from_row), max_bytes)

    async def update_sync_progress(
        self,
        connector_name: str,
        owner_did: str,
        progress: SyncProgress,
        *,
        version: int | None,
        incarnation: str | None,
    ) -> SyncStateRecord | None:
        """Advance the sync state by one compare-and-swap (the write half of the seed's
        ``updateSyncProgress``; the recompute runs in the client, which read ``version``
        and ``incarnation`` and loops on a refusal).

        With ``version`` and ``incarnation``: one ``UPDATE … WHERE version = ? AND
        incarnation = ? RETURNING`` writing ``progress``, version + 1, status untouched.
        With both None: one ``INSERT … ON CONFLICT DO NOTHING RETURNING`` creating the row
        (status idle, version 0, a fresh incarnation) only when none exists.
        Returns the row written, or None when the guard refused (stale version, stale
        incarnation, absent row, or a row already there for a create). Raises
        ``InvalidInput`` naming the field for a malformed value or when only one of
        ``version`` and ``incarnation`` is given.
        """
        key_values = {
            "connector_name": check.key("connectorName", connector_name),
            "owner_did": check.key("ownerDID", owner_did),
        }
        values = progress.values() | {"updated_at": self._ctx.clock()}
        if version is None and incarnation is None:
            new_row = (
                key_values
                | values
                | {"status": SYNC_IDLE, "version": 0, "incarnation": self._ctx.new_id()}
            )
            return _record(await self._db.write_prepared(CREATE_SYNC_STATE, _params(new_row)))
        if version is None:
            raise InvalidInput("version", "must be given with incarnation (both or neither)")
        if incarnation is None:
            raise InvalidInput("incarnation", "must be given with version (both or neither)")
        params = _params(values) | {
            "p_connector_name": key_values["connector_name"],
            "p_owner_did": key_values["owner_did"],
            "p_version": check.count("version", version),
            "p_incarnation": check.key("incarnation", incarnation),
        }
        return _record(await self._db.write_prepared(UPDATE_SYNC_PROGRESS, params))
