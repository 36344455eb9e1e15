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
from store.records import SYNC_IDLE, SYNC_STATUSES, SyncStateRecord
from store.tables import sync_state as ss

DEFAULT_PAGE = 50
MAX_PAGE = 500


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


def _by_key(connector_name: str, owner_did: str) -> sa.ColumnElement[bool]:
    return sa.and_(
        ss.c.connector_name == check.key("connectorName", connector_name),
        ss.c.owner_did == check.key("ownerDID", owner_did),
    )


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
        query = sa.select(ss).where(_by_key(connector_name, owner_did))
        return _record(await self._db.fetch_one(query))

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
        insert = self._db.insert(ss).values(
            values | {"version": 0, "incarnation": self._ctx.new_id()}
        )
        kept = {"connector_name", "owner_did"}
        upsert = insert.on_conflict_do_update(
            index_elements=[ss.c.connector_name, ss.c.owner_did],
            set_={name: getattr(insert.excluded, name) for name in values if name not in kept},
        ).returning(ss)
        row = await self._db.write_one(upsert)
        assert row is not None, "an upsert always returns its row"
        return SyncStateRecord.from_row(row)

    async def delete_sync_state(self, connector_name: str, owner_did: str) -> bool:
        """Delete the sync state (seed ``deleteSyncState``). Returns whether a row was
        deleted (``DELETE … RETURNING``). Raises ``InvalidInput`` for a bad key."""
        delete = sa.delete(ss).where(_by_key(connector_name, owner_did)).returning(ss.c.version)
        return await self._db.write_one(delete) is not None

    async def list_sync_states_for_connector(
        self, connector_name: str, *, after: str | None = None, limit: int = DEFAULT_PAGE
    ) -> list[SyncStateRecord]:
        """The sync states of one connector ordered by owner DID (seed
        ``listSyncStatesForConnector``), with keyset paging: ``after`` is the last owner
        DID already seen, ``limit`` (1 to 501, a page and one to tell whether more follow)
        the most rows returned. Raises ``InvalidInput`` naming the field."""
        query = (
            sa.select(ss)
            .where(ss.c.connector_name == check.key("connectorName", connector_name))
            .order_by(ss.c.owner_did)
            .limit(check.count("limit", limit, minimum=1, maximum=MAX_PAGE + 1))
        )
        if after is not None:
            query = query.where(ss.c.owner_did > check.key("after", after))
        return [SyncStateRecord.from_row(row) for row in await self._db.fetch_all(query)]

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
            insert = (
                self._db.insert(ss)
                .values(
                    key_values
                    | values
                    | {"status": SYNC_IDLE, "version": 0, "incarnation": self._ctx.new_id()}
                )
                .on_conflict_do_nothing(index_elements=[ss.c.connector_name, ss.c.owner_did])
                .returning(ss)
            )
            return _record(await self._db.write_one(insert))
        if version is None:
            raise InvalidInput("version", "must be given with incarnation (both or neither)")
        if incarnation is None:
            raise InvalidInput("incarnation", "must be given with version (both or neither)")
        guard = sa.and_(
            _by_key(connector_name, owner_did),
            ss.c.version == check.count("version", version),
            ss.c.incarnation == check.key("incarnation", incarnation),
        )
        update = (
            sa.update(ss).where(guard).values(values | {"version": ss.c.version + 1}).returning(ss)
        )
        return _record(await self._db.write_one(update))
