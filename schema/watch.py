"""The ``Watch`` type: one verify/repair state machine per provider entity."""

from typing import TYPE_CHECKING, Annotated, Any

import strawberry

from schema.enums import DeferReason, VerificationStatus
from schema.names import to_graphql_name
from schema.node import Node, encode_global_id
from schema.records import mirrors, record_values
from store import validation as check
from store.errors import InvalidInput
from store.records import WATCH_IDENTITY, WatchIdentity, WatchRecord

if TYPE_CHECKING:
    from schema.operation import Operation


KEY_FIELDS = tuple(to_graphql_name(name) for name in WATCH_IDENTITY)
"""The identity's five parts as GraphQL names: the federation key."""


@strawberry.federation.type(
    keys=[" ".join(KEY_FIELDS)],
    description="The verify/repair watch of one provider entity. A federation entity: other "
    "subgraphs refer to it by its identity (owner, connector, model, account, source).",
)
@mirrors(
    WatchRecord,
    types={"verification_status": VerificationStatus, "defer_reason": DeferReason | None},
)
class Watch(Node):
    record: strawberry.Private[WatchRecord]

    @strawberry.field(
        description="The operations whose watch this is (same owner, connector, model, "
        "account and source), oldest first; only those the viewer may see. Needs the right "
        "operations:read. Its rows count against the request's 1000 rows."
    )
    async def operations(
        self, info: strawberry.Info
    ) -> list[Annotated["Operation", strawberry.lazy("schema.operation")]]:
        from schema.operation import Operation

        info.context.require("operations:read")
        records = await info.context.loaders.watch_operations.load(self.record.identity)
        visible = [record for record in records if info.context.can_see(record)]
        info.context.rows.take("operations", len(visible))
        return [Operation.from_record(record) for record in visible]

    @classmethod
    async def resolve_reference(cls, info: strawberry.Info, **key: Any) -> "Watch | None":
        """The entity a gateway asks for by its identity (``_entities``): through the
        request's loader, with the checks of every other read (the right watches:read; the
        viewer must own it). A malformed, unknown or foreign key reads null."""
        info.context.require("watches:read")
        try:
            identity = WatchIdentity(*(check.key(name, key.get(name)) for name in KEY_FIELDS))
        except InvalidInput:
            return None
        record = await info.context.loaders.watch.load(identity)
        if record is None or not info.context.owns(record.owner_did):
            return None
        return cls.from_record(record)

    @classmethod
    def from_record(cls, record: WatchRecord) -> "Watch":
        """The GraphQL view of a stored watch."""
        return cls(
            id=encode_global_id("Watch", list(record.identity.parts)),
            record=record,
            **record_values(cls, record),
        )
