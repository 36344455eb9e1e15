"""The root ``Subscription`` (docs/api.md, 'Live updates'): streams a viewer subscribes to, over
graphql-transport-ws on ``/graphql`` or Apollo's multipart protocol over HTTP.

Each field's rule is in ``resolvers.permissions`` (checked before the stream starts); the
streams come from this process's hub (``resolvers.live.LiveHub``, served by ``server.live.Hub``).
"""

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TypeVar, cast

import strawberry

from resolvers import fields
from resolvers.context import Info
from schema.enums import value_of
from schema.event import OperationEvent, WatchEvent
from schema.inputs import OperationFilter, WatchFilter
from schema.live import WorkSignal
from schema.scalars import EpochMillis
from store import validation as check
from store.errors import InvalidInput
from store.events import OperationEventFilter, WatchEventFilter
from store.records import OperationEventRecord, WatchEventRecord

UNSTREAMED = {
    "nodeKey": "node_key",
    "documentIDs": "document_ids",
    "lastError": "last_error",
    "updatedAfter": "updated_after",
    "updatedBefore": "updated_before",
    "run": "run",
    "search": "search",
}
"""``OperationFilter`` fields an event stream cannot apply (they select by the row's
time or identifiers of the claim, not by who and where, and no event carries them): given,
they are refused, never matched through the operation's row (which is gone once collected)."""
UNSTREAMED_WATCH = {
    "documentIDs": "document_ids",
    "dueBefore": "due_before",
    "sourceID": "source_id",
    "updatedAfter": "updated_after",
    "updatedBefore": "updated_before",
}
"""``WatchFilter`` fields a watch event stream cannot apply: given, they are refused."""


def refuse_unstreamed(where: object, names: dict[str, str], field: str) -> None:
    """Raise ``InvalidInput`` naming ``filter.<name>`` for a field of ``where`` that the
    event streams do not apply."""
    for name, attribute in names.items():
        if getattr(where, attribute) is not None:
            raise InvalidInput(f"filter.{name}", f"{field} does not filter by it")


def operation_event_filter(
    where: OperationFilter | None, visible_to: str | None
) -> OperationEventFilter | None:
    """The store's filter of an ``operationEvents`` stream, narrowed to the operations the
    viewer may see (``visible_to``: its calls and its own; None: every row); None when that
    leaves nothing."""
    where = where or OperationFilter()
    refuse_unstreamed(where, UNSTREAMED, "operationEvents")
    if visible_to is not None and where.visible_to not in (None, visible_to):
        return None
    return OperationEventFilter(
        caller_did=where.caller_did,
        operation_id=where.operation_id,
        owner_did=where.owner_did,
        visible_to=visible_to or where.visible_to,
        connector_name=where.connector_name,
        account_key=where.account_key,
        kind=where.kind,
        states=None if where.states is None else [cast(str, value_of(s)) for s in where.states],
    )


def watch_event_filter(
    where: WatchFilter | None, visible_to: str | None
) -> WatchEventFilter | None:
    """The store's filter of a ``watchEvents`` stream, narrowed to the viewer's own watches
    (``visible_to``; None: every row); None when that leaves nothing."""
    where = where or WatchFilter()
    refuse_unstreamed(where, UNSTREAMED_WATCH, "watchEvents")
    if visible_to is not None and where.owner_did not in (None, visible_to):
        return None
    return WatchEventFilter(
        owner_did=visible_to or where.owner_did,
        connector_name=where.connector_name,
        model=where.model,
        account_key=where.account_key,
        statuses=None if where.status is None else [cast(str, value_of(where.status))],
    )


_Event = TypeVar("_Event", OperationEventRecord, WatchEventRecord)
_Filter = TypeVar("_Filter", OperationEventFilter, WatchEventFilter)


async def streamed(
    info: Info,
    name: str,
    read: Callable[[str | None, int, _Filter], Awaitable[list[_Event]]],
    where: _Filter | None,
    after: str | None,
) -> AsyncIterator[_Event]:
    """The events of log ``name`` that ``read`` returns for ``where`` (None: nothing, the
    stream ends at once), from this connection's hub (``Hub.events``), each to be read with
    fresh loaders."""
    if where is None:
        return
    context = info.context
    async for event in context.live().events(
        context.subscriber(), name, lambda at, size: read(at, size, where), after
    ):
        context.renew()
        yield event


@strawberry.type
class Subscription:
    @fields.subscription(
        description="A signal each time work may have become leasable for `connectorName` "
        "(omitted: any connector): a new or reissued claim, a released lease, a finished "
        "operation (its entity's next one and its account's cap are free), a lease that "
        "lapsed, a deferral that came due, an account's cap or throttle eased. The first "
        "signal comes at once: a worker leases until `leaseOperations` answers nothing after "
        "each signal, so nothing that commits meanwhile is missed. Signals pending for a "
        "slow reader are coalesced, never queued. Needs `service`, as `dueOperations`. "
        "Errors: BAD_USER_INPUT (a malformed `connectorName`); FORBIDDEN; "
        "TOO_MANY_SUBSCRIPTIONS; UNAUTHENTICATED when the token expires (the stream ends)."
    )
    async def work_available(
        self, info: Info, connector_name: str | None = None
    ) -> AsyncGenerator[WorkSignal, None]:
        connector = check.optional_key("connectorName", connector_name)
        async for name, at in info.context.live().work(info.context.subscriber(), connector):
            yield WorkSignal(connector_name=name, at=EpochMillis(at))

    @fields.subscription(
        description="Each event of the operations the viewer may read (its calls and its "
        "own; `operator`, `observer` and `service`: all), in log order, as it commits: "
        "`filter` matches each event by what it carries, alike before and after its operation "
        "is collected: `states` its `toState`, `kind` its `kind`, the other fields the "
        "operation's key, owner, connector and account (`nodeKey`, `documentIDs`, `lastError`, "
        "`updatedAfter` and `updatedBefore` are refused). "
        "`after`: the `sequence` of the last event seen; what followed is replayed first, "
        "with no gap and no repeat (omitted: from now on; `operationEventsHead` read "
        'first pins "now" for a reader that may reconnect before its first event). A '
        "reader that falls behind "
        "holds the server no more than one page of events: it reads on from where it "
        "stands, and after a reconnect resumes with `after`. Needs operations:read. "
        "Errors: BAD_USER_INPUT (also an `after` past the newest sequence the log handed "
        "out); EVENTS_COLLECTED when events after `after` were collected (the log is "
        "collected oldest first, by age); FORBIDDEN; TOO_MANY_SUBSCRIPTIONS; "
        "UNAUTHENTICATED when the token expires (the stream ends)."
    )
    async def operation_events(
        self, info: Info, filter: OperationFilter | None = None, after: str | None = None
    ) -> AsyncGenerator[OperationEvent, None]:
        where = operation_event_filter(filter, info.context.viewer.visible_to)
        read = info.context.store.events.operation_events_after
        async for event in streamed(info, "operation", read, where, after):
            yield OperationEvent.from_record(event)

    @fields.subscription(
        description="Each event of the watches the viewer may read (its own; `operator`, "
        "`observer` and `service`: all), as `operationEvents`: `filter`'s `status` matches "
        "the event's `toStatus`, its other fields the watch's identity (`documentIDs`, "
        "`dueBefore`, `updatedAfter` and `updatedBefore` are refused). Needs watches:read. "
        "Errors: as `operationEvents`."
    )
    async def watch_events(
        self, info: Info, filter: WatchFilter | None = None, after: str | None = None
    ) -> AsyncGenerator[WatchEvent, None]:
        where = watch_event_filter(filter, info.context.viewer.visible_to)
        read = info.context.store.events.watch_events_after
        async for event in streamed(info, "watch", read, where, after):
            yield WatchEvent.from_record(event)
