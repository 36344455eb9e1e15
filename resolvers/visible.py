"""The viewer-scoped reader: the one way resolvers and nested fields turn store records into
the ``Operation`` and ``Watch`` objects (and other rows) a viewer may see.

Root fields have their scopes checked first by their rule (``resolvers.permissions``);
what they and every nested field return passes through a ``Visible`` (``info.context.visible``),
which drops a row of another tenant: a single one reads as null, a list leaves it out. Schema
types reach rights only through it (they import nothing of ``resolvers/``).

``SERVES`` names every field returning an ``Operation`` or ``Watch`` (alone, in a list, a
connection, a payload or a union) whose resolver goes through the reader;
``tests/api/test_visible.py`` walks the schema and fails for any such field missing here.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from resolvers.budget import Budget
from resolvers.loaders import Loaders, Sized
from resolvers.permissions import Viewer, can_see, can_see_lease, owns, require, sees_owned
from schema.event import (
    OperationEvent,
    OperationEventConnection,
    OperationEventEdge,
    WatchEvent,
    WatchEventConnection,
    WatchEventEdge,
)
from schema.operation import KEY_FIELDS as OPERATION_KEYS
from schema.operation import Operation
from schema.pagination import PageInfo
from schema.watch import KEY_FIELDS as WATCH_KEYS
from schema.watch import Watch
from store import validation as check
from store.errors import InvalidInput
from store.events import DEFAULT_EVENTS, MAX_EVENTS
from store.records import OperationRecord, WatchIdentity, WatchRecord
from store.sizes import Measured

_R = TypeVar("_R")
_E = TypeVar("_E")

SERVES: Final = frozenset(
    {
        ("Query", "operation"),
        ("Query", "operations"),
        ("Query", "node"),
        ("Query", "dueOperations"),
        ("Query", "watch"),
        ("Query", "watchByDocument"),
        ("Query", "watches"),
        ("Query", "dueWatches"),
        ("Query", "_entities"),
        ("Mutation", "claimOperation"),
        ("Mutation", "acquireLease"),
        ("Mutation", "renewLease"),
        ("Mutation", "releaseLease"),
        ("Mutation", "markSendStarted"),
        ("Mutation", "deferOperation"),
        ("Mutation", "recordOperation"),
        ("Mutation", "finalizeOperation"),
        ("Mutation", "armWatch"),
        ("Mutation", "claimWatchAttempt"),
        ("Mutation", "deferWatch"),
        ("Mutation", "recordVerification"),
        ("Mutation", "recordIngress"),
        ("Mutation", "claimOperations"),
        ("Mutation", "markSendsStarted"),
        ("Mutation", "recordOperations"),
        ("Mutation", "finalizeOperations"),
        ("Mutation", "recordVerifications"),
        ("Mutation", "leaseOperations"),
        ("Mutation", "renewLeases"),
        ("Mutation", "releaseLeases"),
        ("Mutation", "claimWatches"),
        ("Mutation", "reissueOperations"),
        ("Mutation", "forceReleaseLeases"),
        ("Operation", "watch"),
        ("OperationEvent", "operation"),
        ("WatchEvent", "watch"),
        ("Operation", "events"),
        ("Watch", "events"),
        ("Subscription", "operationEvents"),
        ("Subscription", "watchEvents"),
        ("Operation", "reissuedFrom"),
        ("Operation", "reissuedAs"),
        ("Watch", "operations"),
    }
)
"""(type, field) of every field whose ``Operation``/``Watch`` values come from the reader."""


@dataclass(frozen=True, slots=True)
class Visible:
    """One request's reader: the viewer, the request's loaders and its budget. Every list
    it returns charges the request's bytes with the size of each row it keeps."""

    viewer: Viewer
    loaders: Loaders
    budget: Budget

    def require(self, scope: str) -> None:
        """Raise ``FORBIDDEN`` unless the viewer holds ``scope`` (a nested field's right)."""
        require(self.viewer, scope)

    def owns(self, owner_did: str) -> bool:
        """True when the viewer may see a pending authorization of ``owner_did``: its owner,
        or a service."""
        return owns(self.viewer, owner_did)

    def sees_owned(self, owner_did: str) -> bool:
        """True when the viewer may see a sync state of ``owner_did``: its owner, or a viewer
        that reads every row."""
        return sees_owned(self.viewer, owner_did)

    def sees_operation(self, record: OperationRecord) -> bool:
        """True when the viewer may see the operation: its caller or owner, or a viewer that
        reads every row."""
        return can_see(self.viewer, record.caller_did, record.owner_did)

    def sees_watch(self, record: WatchRecord) -> bool:
        """True when the viewer may see the watch: its owner, or a viewer that reads every
        row."""
        return sees_owned(self.viewer, record.owner_did)

    def charged(self, field: str, page: Measured[_R], sees: Callable[[_R], bool]) -> list[_R]:
        """The records of ``page`` that ``sees`` keeps, in order, their sizes spent from the
        request's bytes for ``field`` (``Budget.spend``)."""
        kept = seen(page, sees)
        self.budget.spend(field, kept.sizes)
        return kept

    def operation(self, record: OperationRecord | None) -> Operation | None:
        """``record`` as the viewer may see it (``sees_operation``); else None."""
        if record is None or not self.sees_operation(record):
            return None
        return Operation.from_record(record)

    def operations(self, field: str, page: Measured[OperationRecord]) -> list[Operation]:
        """The operations of ``page`` the viewer may see, in order, charged to ``field``."""
        seen = self.charged(field, page, self.sees_operation)
        return [Operation.from_record(record) for record in seen]

    def watch(self, record: WatchRecord | None) -> Watch | None:
        """``record`` as the viewer may see it (``sees_watch``); else None."""
        if record is None or not self.sees_watch(record):
            return None
        return Watch.from_record(record)

    def watches(self, field: str, page: Measured[WatchRecord]) -> list[Watch]:
        """The watches of ``page`` the viewer may see, in order, charged to ``field``."""
        return [Watch.from_record(record) for record in self.charged(field, page, self.sees_watch)]

    def lease_token(self, record: OperationRecord) -> str | None:
        """The operation's lease token when the viewer is its caller (or a service)."""
        return record.lease_token if can_see_lease(self.viewer, record.caller_did) else None

    async def watch_of(self, record: OperationRecord) -> Watch | None:
        """The watch an operation's finalize arms (``Operation.watch``): needs watches:read;
        None when absent or not the viewer's; charged."""
        self.require("watches:read")
        found = await self.loaders.watch.load(record.identity)
        return first_of(self.watches("watch", measured_of(found)))

    async def operation_at(self, key: tuple[str, str]) -> Operation | None:
        """The operation at ``key`` (``(caller_did, operation_id)``: ``OperationEvent.operation``):
        needs operations:read; None when absent (collected) or not the viewer's; charged."""
        self.require("operations:read")
        found = await self.loaders.operation.load(key)
        return first_of(self.operations("operation", measured_of(found)))

    async def watch_at(self, identity: WatchIdentity) -> Watch | None:
        """The watch at ``identity`` (``WatchEvent.watch``): needs watches:read; None when
        absent or not the viewer's; charged."""
        self.require("watches:read")
        found = await self.loaders.watch.load(identity)
        return first_of(self.watches("watch", measured_of(found)))

    async def linked(self, field: str, record: OperationRecord, link: str) -> Operation | None:
        """The operation ``record`` names in its ``link`` column (``reissued_from`` or
        ``reissued_as``: an operation id under the same caller), for ``field``: needs
        operations:read; None when absent or not the viewer's; charged."""
        self.require("operations:read")
        operation_id = getattr(record, link)
        if operation_id is None:
            return None
        found = await self.loaders.operation.load((record.caller_did, operation_id))
        return first_of(self.operations(field, measured_of(found)))

    async def operations_of(self, record: WatchRecord) -> list[Operation]:
        """The operations of a watch the viewer may see, oldest first (``Watch.operations``):
        needs operations:read; they count against the request's rows and bytes."""
        self.require("operations:read")
        rows = await self.loaders.watch_operations.load(record.identity)
        kept = seen(measured_of(*rows), self.sees_operation)
        self.budget.take("operations", len(kept))
        self.budget.spend("operations", kept.sizes)
        return [Operation.from_record(operation) for operation in kept]

    def _event_page(self, field: str, first: int | None, page: Measured[_E]) -> list[_E]:
        """A page of events read ``first`` + 1 deep: its first ``first``, counted against
        the request's rows and charged its bytes, for ``field``."""
        kept = page.first(DEFAULT_EVENTS if first is None else first)
        self.budget.take(field, len(kept))
        self.budget.spend(field, kept.sizes)
        return kept

    def _event_size(self, first: int | None) -> int:
        return check.count(
            "first", DEFAULT_EVENTS if first is None else first, minimum=1, maximum=MAX_EVENTS
        )

    async def operation_events(
        self, record: OperationRecord, first: int | None, after: str | None
    ) -> OperationEventConnection:
        """The events of an operation the viewer may see, oldest first, ``first`` (1 to
        500, default 50) after the event ``after`` (``Operation.events``): needs
        operations:read; an operation the viewer may not see has none; charged."""
        self.require("operations:read")
        size = self._event_size(first)
        if not self.sees_operation(record):
            return OperationEventConnection(edges=[], page_info=page_info([], False, after))
        key = (record.caller_did, record.operation_id)
        page = await self.loaders.operation_events.load((key, after, size + 1))
        kept = self._event_page("events", size, page)
        edges = [
            OperationEventEdge(cursor=event.sequence, node=OperationEvent.from_record(event))
            for event in kept
        ]
        cursors = [edge.cursor for edge in edges]
        return OperationEventConnection(
            edges=edges, page_info=page_info(cursors, len(page) > size, after)
        )

    async def watch_events(
        self, record: WatchRecord, first: int | None, after: str | None
    ) -> WatchEventConnection:
        """The events of a watch the viewer may see, oldest first, as ``operation_events``
        (``Watch.events``): needs watches:read."""
        self.require("watches:read")
        size = self._event_size(first)
        if not self.sees_watch(record):
            return WatchEventConnection(edges=[], page_info=page_info([], False, after))
        page = await self.loaders.watch_events.load((record.identity, after, size + 1))
        kept = self._event_page("events", size, page)
        edges = [
            WatchEventEdge(cursor=event.sequence, node=WatchEvent.from_record(event))
            for event in kept
        ]
        cursors = [edge.cursor for edge in edges]
        return WatchEventConnection(
            edges=edges, page_info=page_info(cursors, len(page) > size, after)
        )

    async def operation_entity(self, key: Mapping[str, Any]) -> Operation | None:
        """The operation a gateway asks for by its key (``_entities``): needs
        operations:read; a malformed, unknown or foreign key reads None; charged."""
        self.require("operations:read")
        try:
            caller_did, operation_id = (check.key(name, key.get(name)) for name in OPERATION_KEYS)
        except InvalidInput:
            return None
        found = await self.loaders.operation.load((caller_did, operation_id))
        return first_of(self.operations("_entities", measured_of(found)))

    async def watch_entity(self, key: Mapping[str, Any]) -> Watch | None:
        """The watch a gateway asks for by its identity (``_entities``): needs watches:read;
        a malformed, unknown or foreign key reads None; charged."""
        self.require("watches:read")
        try:
            identity = WatchIdentity(*(check.key(name, key.get(name)) for name in WATCH_KEYS))
        except InvalidInput:
            return None
        return first_of(
            self.watches("_entities", measured_of(await self.loaders.watch.load(identity)))
        )


def page_info(cursors: list[str], has_next_page: bool, after: str | None) -> PageInfo:
    """Where a page of ``cursors`` stands: more after it (past the page's size, or left out
    by the request's bytes), and whether it began after one."""
    return PageInfo(
        has_next_page=has_next_page,
        has_previous_page=after is not None,
        start_cursor=cursors[0] if cursors else None,
        end_cursor=cursors[-1] if cursors else None,
    )


def seen(page: Measured[_R], sees: Callable[[_R], bool]) -> Measured[_R]:
    """The records of ``page`` that ``sees`` keeps, with their sizes, in order."""
    pairs = [(record, size) for record, size in zip(page, page.sizes, strict=True) if sees(record)]
    return Measured((record for record, _ in pairs), (size for _, size in pairs))


def measured_of(*rows: Sized[_R] | None) -> Measured[_R]:
    """Rows answered from the loaders (None skipped), each with what its answer costs
    (``Loaders.charge``)."""
    return Loaders.charge(row for row in rows if row is not None)


_T = TypeVar("_T")


def first_of(items: list[_T]) -> _T | None:
    """The first of ``items``, or None."""
    return items[0] if items else None
