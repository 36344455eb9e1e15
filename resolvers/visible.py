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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from resolvers.loaders import Loaders
from resolvers.permissions import Viewer, can_see, can_see_lease, owns, require
from schema.operation import KEY_FIELDS as OPERATION_KEYS
from schema.operation import Operation
from schema.watch import KEY_FIELDS as WATCH_KEYS
from schema.watch import Watch
from store import validation as check
from store.errors import InvalidInput
from store.records import OperationRecord, WatchIdentity, WatchRecord

if TYPE_CHECKING:
    from resolvers.context import RowBudget

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
        ("Mutation", "leaseOperations"),
        ("Mutation", "renewLeases"),
        ("Mutation", "releaseLeases"),
        ("Mutation", "claimWatches"),
        ("Operation", "watch"),
        ("Watch", "operations"),
    }
)
"""(type, field) of every field whose ``Operation``/``Watch`` values come from the reader."""


@dataclass(frozen=True, slots=True)
class Visible:
    """One request's reader: the viewer, the request's loaders and its row budget."""

    viewer: Viewer
    loaders: Loaders
    rows: "RowBudget"

    def require(self, scope: str) -> None:
        """Raise ``FORBIDDEN`` unless the viewer holds ``scope`` (a nested field's right)."""
        require(self.viewer, scope)

    def owns(self, owner_did: str) -> bool:
        """True when the viewer may see a row (sync state, pending auth) of ``owner_did``."""
        return owns(self.viewer, owner_did)

    def operation(self, record: OperationRecord | None) -> Operation | None:
        """``record`` as the viewer may see it (its caller or owner, or a service); else None."""
        if record is None or not can_see(self.viewer, record.caller_did, record.owner_did):
            return None
        return Operation.from_record(record)

    def operations(self, records: Iterable[OperationRecord]) -> list[Operation]:
        """The operations of ``records`` the viewer may see, in order."""
        return [
            Operation.from_record(record)
            for record in records
            if can_see(self.viewer, record.caller_did, record.owner_did)
        ]

    def watch(self, record: WatchRecord | None) -> Watch | None:
        """``record`` as the viewer may see it (its owner, or a service); else None."""
        if record is None or not owns(self.viewer, record.owner_did):
            return None
        return Watch.from_record(record)

    def watches(self, records: Iterable[WatchRecord]) -> list[Watch]:
        """The watches of ``records`` the viewer may see, in order."""
        return [
            Watch.from_record(record) for record in records if owns(self.viewer, record.owner_did)
        ]

    def lease_token(self, record: OperationRecord) -> str | None:
        """The operation's lease token when the viewer is its caller (or a service)."""
        return record.lease_token if can_see_lease(self.viewer, record.caller_did) else None

    async def watch_of(self, record: OperationRecord) -> Watch | None:
        """The watch an operation's finalize arms (``Operation.watch``): needs watches:read;
        None when absent or not the viewer's."""
        self.require("watches:read")
        return self.watch(await self.loaders.watch.load(record.identity))

    async def operations_of(self, record: WatchRecord) -> list[Operation]:
        """The operations of a watch the viewer may see, oldest first (``Watch.operations``):
        needs operations:read; they count against the request's rows."""
        self.require("operations:read")
        visible = self.operations(await self.loaders.watch_operations.load(record.identity))
        self.rows.take("operations", len(visible))
        return visible

    async def operation_entity(self, key: Mapping[str, Any]) -> Operation | None:
        """The operation a gateway asks for by its key (``_entities``): needs
        operations:read; a malformed, unknown or foreign key reads None."""
        self.require("operations:read")
        try:
            caller_did, operation_id = (check.key(name, key.get(name)) for name in OPERATION_KEYS)
        except InvalidInput:
            return None
        return self.operation(await self.loaders.operation.load((caller_did, operation_id)))

    async def watch_entity(self, key: Mapping[str, Any]) -> Watch | None:
        """The watch a gateway asks for by its identity (``_entities``): needs watches:read;
        a malformed, unknown or foreign key reads None."""
        self.require("watches:read")
        try:
            identity = WatchIdentity(*(check.key(name, key.get(name)) for name in WATCH_KEYS))
        except InvalidInput:
            return None
        return self.watch(await self.loaders.watch.load(identity))
