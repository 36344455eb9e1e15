"""The ``Watch`` type: one verify/repair state machine per provider entity."""

from typing import TYPE_CHECKING, Annotated, Any

import strawberry

from schema.enums import DeferReason, VerificationStatus
from schema.node import Node, encode_global_id
from schema.records import from_record
from schema.scalars import EpochMillis
from store import validation as check
from store.errors import InvalidInput
from store.records import WatchIdentity, WatchRecord

if TYPE_CHECKING:
    from schema.operation import Operation


KEY_FIELDS = ("ownerDID", "connectorName", "model", "accountKey", "sourceID")


@strawberry.federation.type(
    keys=[" ".join(KEY_FIELDS)],
    description="The verify/repair watch of one provider entity. A federation entity: other "
    "subgraphs refer to it by its identity (owner, connector, model, account, source).",
)
class Watch(Node):
    owner_did: str
    connector_name: str
    model: str
    account_key: str
    source_id: str
    document_id: str | None
    repair_generation: int
    verification_status: VerificationStatus
    verification_attempts: int
    observed_winner_digest: str | None
    verified_state_digest: str | None
    next_attempt_at: EpochMillis | None
    claimed_until: EpochMillis | None
    defer_reason: DeferReason | None
    version: int
    created_at: EpochMillis
    updated_at: EpochMillis

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
        identity = WatchIdentity(
            self.owner_did, self.connector_name, self.model, self.account_key, self.source_id
        )
        records = await info.context.loaders.watch_operations.load(identity)
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
        return from_record(
            cls,
            record,
            id=encode_global_id("Watch", watch_key(record.identity)),
            verification_status=VerificationStatus(record.verification_status),
            defer_reason=DeferReason(record.defer_reason) if record.defer_reason else None,
        )


def watch_key(identity: WatchIdentity) -> list[str]:
    """The identity as the list a global id carries."""
    return [
        identity.owner_did,
        identity.connector_name,
        identity.model,
        identity.account_key,
        identity.source_id,
    ]
