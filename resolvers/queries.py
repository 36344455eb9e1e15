"""The root ``Query``: thin resolvers that check rights, call the store and map records."""

from typing import Any, cast

import strawberry

from resolvers import fields
from resolvers.context import Info
from resolvers.errors import bad_input, not_found
from resolvers.visible import first_of, page_info
from schema.enums import value_of
from schema.inputs import OperationFilter, WatchFilter, WatchIdentityInput
from schema.node import Node, decode_cursor, decode_global_id, encode_opaque
from schema.operation import Operation
from schema.pagination import (
    OperationConnection,
    OperationEdge,
    OperationOrder,
    PageInfo,
    WatchConnection,
    WatchEdge,
)
from schema.pending_auth import PendingAuth
from schema.scalars import EpochMillis
from schema.sync_state import SyncState, SyncStateConnection, SyncStateEdge, sync_state_or_none
from schema.watch import Watch
from store import operations as ops
from store import watches as wat
from store.errors import InvalidInput
from store.events import BEFORE_FIRST
from store.pages import MAX_PAGE
from store.records import OperationRecord, SyncStateRecord, WatchIdentity, WatchRecord
from store.sizes import Measured

DEFAULT_PAGE = 50
DEFAULT_LIMIT = 100


def page_size(field: str, value: int | None, default: int) -> int:
    """``value`` checked to lie in 1..500, or ``default``."""
    if value is None:
        return default
    if not 1 <= value <= MAX_PAGE:
        raise bad_input(field, f"must be between 1 and {MAX_PAGE}")
    return value


def page_request(
    info: Info,
    first: int | None,
    after: str | None,
    arity: int,
    kind: type | None = None,
    *,
    names: tuple[str, str] = ("first", "after"),
) -> tuple[int, list[Any] | None]:
    """A connection's page: its size (``first``, 1 to 500, counted against the request's
    rows) and the key behind ``after`` (``arity`` parts, each a ``kind`` when given), or
    ``BAD_USER_INPUT`` naming the argument (as ``names`` spell the two: ``last`` and
    ``before`` for a page backwards)."""
    size_name, cursor_name = names
    size = page_size(size_name, first, DEFAULT_PAGE)
    info.context.budget.take(size_name, size)
    if after is None:
        return size, None
    key = decode_cursor(after, arity)
    if key is None or (kind is not None and not all(isinstance(part, kind) for part in key)):
        raise bad_input(cursor_name, "is not a cursor from this connection")
    return size, key


def to_store_filter(where: OperationFilter | None, visible_to: str | None) -> ops.OperationFilter:
    """The store's filter for a GraphQL one, narrowed to what the viewer may see."""
    where = where or OperationFilter()
    if visible_to is not None and where.visible_to not in (None, visible_to):
        return ops.OperationFilter(states=[])
    return ops.OperationFilter(
        node_key=where.node_key,
        caller_did=where.caller_did,
        operation_id=where.operation_id,
        visible_to=visible_to or where.visible_to,
        connector_name=where.connector_name,
        states=None if where.states is None else [cast(str, value_of(s)) for s in where.states],
        document_ids=where.document_ids,
        owner_did=where.owner_did,
        account_key=where.account_key,
        kind=where.kind,
        last_error=where.last_error,
        updated_after=where.updated_after,
        updated_before=where.updated_before,
        run=value_of(where.run),
        search=where.search,
    )


def operation_cursor(record: OperationRecord) -> str:
    """The keyset cursor of an operation: its order key."""
    return encode_opaque(list(record.order_key))


def to_watch_filter(where: WatchFilter | None, visible_to: str | None) -> wat.WatchFilter | None:
    """The store's watch filter for a GraphQL one, narrowed to the watches of ``visible_to``
    (a viewer without ``service``); None when that leaves nothing to list."""
    where = where or WatchFilter()
    if visible_to is not None and where.owner_did not in (None, visible_to):
        return None
    return wat.WatchFilter(
        document_ids=where.document_ids,
        owner_did=visible_to or where.owner_did,
        connector_name=where.connector_name,
        model=where.model,
        status=value_of(where.status),
        due_before=where.due_before,
        account_key=where.account_key,
        updated_after=where.updated_after,
        updated_before=where.updated_before,
        source_id=where.source_id,
    )


def watch_cursor(record: WatchRecord) -> str:
    """The keyset cursor of a watch: its identity."""
    return encode_opaque(list(record.order_key))


async def node_of(info: Info, id: str) -> Node | None:
    """The object behind ``id`` when the viewer may see it, else None."""
    decoded = decode_global_id(id)
    store = info.context.store
    visible = info.context.visible
    if decoded is not None and decoded[0] == "Operation" and isinstance(decoded[1], str):
        visible.require("operations:read")
        where = ops.OperationFilter(node_key=decoded[1], visible_to=info.context.viewer.visible_to)
        async with info.context.budget.reading("node") as allowance:
            found = await store.operations.list_tracked_operations(where, max_bytes=allowance)
            return first_of(visible.operations("node", found))
    elif (
        decoded is not None
        and decoded[0] == "Watch"
        and isinstance(decoded[1], list)
        and len(decoded[1]) == 5
        and all(isinstance(part, str) for part in decoded[1])
    ):
        visible.require("watches:read")
        return visible.watch(await store.watches.get_watch(WatchIdentity(*decoded[1])))
    return None


@strawberry.type
class Query:
    @fields.query(description="The server's clock, so workers can set lease expiries.")
    def server_time(self, info: Info) -> EpochMillis:
        return EpochMillis(info.context.store.clock())

    @fields.query(
        description="The `sequence` of the newest operation event the log handed out (32 "
        "zeros before the first): `operationEvents`' `after` for a reader that follows from "
        "now and, after a reconnect, resumes from there with no gap, though no event reached "
        "it yet. Needs operations:read."
    )
    async def operation_events_head(self, info: Info) -> str:
        info.context.visible.require("operations:read")
        return await info.context.store.events.operation_events_head() or BEFORE_FIRST

    @fields.query(
        description="`operationEventsHead` for the watches log (`watchEvents`' `after`). "
        "Needs watches:read."
    )
    async def watch_events_head(self, info: Info) -> str:
        info.context.visible.require("watches:read")
        return await info.context.store.events.watch_events_head() or BEFORE_FIRST

    @fields.query(description="One operation by its key, or null.")
    async def operation(self, info: Info, caller_did: str, operation_id: str) -> Operation | None:
        record = await info.context.store.operations.get_operation(caller_did, operation_id)
        return info.context.visible.operation(record)

    @fields.query(
        description="Operations matching the filter, by pages, oldest first (`orderBy`: "
        "NEWEST_FIRST the other way): `first` after the cursor `after`, or backwards the "
        "`last` before the cursor `before` (with neither cursor: the last page), in the same "
        "order; cursors hold in both directions. A page stops early when the request's "
        "answer would pass MAX_RESPONSE_BYTES (the side it stopped on says more follow: "
        "page on from its last cursor, or back from its first)."
    )
    async def operations(
        self,
        info: Info,
        filter: OperationFilter | None = None,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        order_by: OperationOrder = OperationOrder.OLDEST_FIRST,
    ) -> OperationConnection:
        viewer = info.context.viewer
        backwards = last is not None or before is not None
        if backwards and (first is not None or after is not None):
            raise bad_input(
                "last" if last is not None else "before", "cannot go with first or after"
            )
        if backwards:
            size, key = page_request(info, last, before, 3, names=("last", "before"))
        else:
            size, key = page_request(info, first, after, 3)
        where = to_store_filter(filter, viewer.visible_to)
        store = info.context.store
        async with info.context.budget.reading("operations") as allowance:
            try:
                records = await store.operations.list_tracked_operations(
                    where,
                    after=None if key is None else tuple(key),
                    limit=size + 1,
                    max_bytes=allowance,
                    newest_first=(order_by == OperationOrder.NEWEST_FIRST) != backwards,
                )
            except InvalidInput as error:
                # Backwards, the store reads the other order after the cursor `before` gave.
                if backwards and error.field == "after":
                    raise type(error)("before", error.problem) from error
                raise
            nodes = info.context.visible.operations("operations", records.first(size))
        if backwards:
            nodes.reverse()
        edges = [OperationEdge(cursor=operation_cursor(node.record), node=node) for node in nodes]
        more = len(records) > size or records.cut
        cursors = [edge.cursor for edge in edges]
        page = page_info(cursors, more, after)
        if backwards:
            page = PageInfo(
                has_next_page=before is not None,
                has_previous_page=more,
                start_cursor=page.start_cursor,
                end_cursor=page.end_cursor,
            )
        return OperationConnection(
            edges=edges,
            page_info=page,
            count=lambda: store.operations.count_tracked_operations(where),
        )

    @fields.shareable_query(
        description="The object behind a global id. Shareable: a Relay subgraph beside this "
        "one may define `Query.node` too."
    )
    async def node(self, info: Info, id: strawberry.ID) -> Node | None:
        try:
            found = await node_of(info, id)
        except InvalidInput:  # a key inside a forged id: not ours, whatever the key's field
            found = None
        if found is None:
            raise not_found("no object has this id")
        return found

    @fields.query(description="Whether a later operation exists on the same document.")
    async def has_newer_operation_on_document(
        self, info: Info, caller_did: str, operation_id: str
    ) -> bool:
        return await info.context.store.operations.has_newer_operation_on_document(
            caller_did, operation_id, visible_to=info.context.viewer.visible_to
        )

    @fields.query(
        description="Live operations a worker may pick up now, oldest due first; fewer than "
        "`limit` when the request's answer would pass MAX_RESPONSE_BYTES."
    )
    async def due_operations(
        self,
        info: Info,
        now: EpochMillis,
        limit: int | None = None,
        connector_name: str | None = None,
    ) -> list[Operation]:
        size = page_size("limit", limit, DEFAULT_LIMIT)
        info.context.budget.take("limit", size)
        async with info.context.budget.reading("dueOperations") as allowance:
            records = await info.context.store.retention.list_due_operations(
                now, size, connector_name, max_bytes=allowance
            )
            return info.context.visible.operations("dueOperations", records)

    @fields.query(description="One watch by its identity, or null.")
    async def watch(self, info: Info, identity: WatchIdentityInput) -> Watch | None:
        record = await info.context.store.watches.get_watch(WatchIdentity.of(identity))
        return info.context.visible.watch(record)

    @fields.query(
        description="A watch naming the document (the first in identity order when several "
        "connectors watch it), or null."
    )
    async def watch_by_document(self, info: Info, document_id: str) -> Watch | None:
        viewer = info.context.viewer
        watches = info.context.store.watches
        if viewer.reads_all:
            return info.context.visible.watch(await watches.get_watch_by_document(document_id))
        mine = await watches.list_watches_matching(
            wat.WatchFilter(document_ids=[document_id], owner_did=viewer.visible_to), limit=1
        )
        return info.context.visible.watch(mine[0] if mine else None)

    @fields.query(
        description="Watches matching the filter, in identity order, by pages. A page stops "
        "early when the request's answer would pass MAX_RESPONSE_BYTES (hasNextPage stays "
        "true: page on with `after`)."
    )
    async def watches(
        self,
        info: Info,
        filter: WatchFilter | None = None,
        first: int | None = None,
        after: str | None = None,
    ) -> WatchConnection:
        viewer = info.context.viewer
        size, after_key = page_request(info, first, after, 5, str)
        where = to_watch_filter(filter, viewer.visible_to)
        async with info.context.budget.reading("watches") as allowance:
            records = (
                Measured[WatchRecord]()
                if where is None
                else await info.context.store.watches.list_watches_matching(
                    where,
                    after=None if after_key is None else cast(wat.WatchOrderKey, tuple(after_key)),
                    limit=size + 1,
                    max_bytes=allowance,
                )
            )
            nodes = info.context.visible.watches("watches", records.first(size))
        edges = [WatchEdge(cursor=watch_cursor(node.record), node=node) for node in nodes]
        more = len(records) > size or records.cut
        return WatchConnection(
            edges=edges, page_info=page_info([e.cursor for e in edges], more, after)
        )

    @fields.query(
        description="A pending OAuth authorization by its state, without the code verifier "
        "(only consumePendingAuth returns that), or null."
    )
    async def pending_auth(self, info: Info, state: str) -> PendingAuth | None:
        record = await info.context.store.pending_auth.get_pending_auth(state)
        if record is None or not info.context.visible.owns(record.owner_did):
            return None
        return PendingAuth.from_record(record)

    @fields.query(description="The sync state of one connector for one owner, or null.")
    async def sync_state(self, info: Info, connector_name: str, owner_did: str) -> SyncState | None:
        if not info.context.visible.sees_owned(owner_did):
            return None
        record = await info.context.store.sync_state.get_sync_state(connector_name, owner_did)
        return sync_state_or_none(record)

    @fields.query(
        description="One connector's sync states, ordered by owner DID, by pages. A page "
        "stops early when the request's answer would pass MAX_RESPONSE_BYTES (hasNextPage "
        "stays true: page on with `after`)."
    )
    async def sync_states(
        self,
        info: Info,
        connector_name: str,
        first: int | None = None,
        after: str | None = None,
    ) -> SyncStateConnection:
        viewer = info.context.viewer
        size, after_key = page_request(info, first, after, 1, str)
        after_owner = None if after_key is None else after_key[0]
        store = info.context.store.sync_state
        # A tenant's page holds its own row alone, if any.
        own = viewer.visible_to or ""
        mine = None if after_owner is not None and own <= after_owner else own
        async with info.context.budget.reading("syncStates") as allowance:
            if viewer.reads_all:
                records = await store.list_sync_states_for_connector(
                    connector_name, after=after_owner, limit=size + 1, max_bytes=allowance
                )
            elif mine is None:
                records = Measured[SyncStateRecord]()
            else:
                records = await store.list_sync_states_for_connector(
                    connector_name, owner_did=mine, limit=1, max_bytes=allowance
                )
            shown = info.context.visible.charged("syncStates", records.first(size), lambda _: True)
        edges = [
            SyncStateEdge(cursor=encode_opaque([r.owner_did]), node=SyncState.from_record(r))
            for r in shown
        ]
        more = len(records) > size or records.cut
        return SyncStateConnection(
            edges=edges, page_info=page_info([e.cursor for e in edges], more, after)
        )

    @fields.query(
        description="Pending watches a verifier may claim now: nextAttemptAt <= now and the "
        "claim absent or lapsed, ordered by nextAttemptAt then identity; fewer than `limit` "
        "when the request's answer would pass MAX_RESPONSE_BYTES."
    )
    async def due_watches(
        self,
        info: Info,
        now: EpochMillis,
        limit: int | None = None,
        connector_name: str | None = None,
    ) -> list[Watch]:
        size = page_size("limit", limit, DEFAULT_LIMIT)
        info.context.budget.take("limit", size)
        async with info.context.budget.reading("dueWatches") as allowance:
            records = await info.context.store.watches.list_due_watches(
                now, size, connector_name, max_bytes=allowance
            )
            return info.context.visible.watches("dueWatches", records)
