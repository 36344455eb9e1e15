"""The ``SyncState`` type: one (connector, owner)'s sync checkpoint, and its connection."""

import strawberry

from schema.enums import SyncStatus
from schema.pagination import PageInfo
from schema.records import mirrors, record_values
from store.records import SyncStateRecord


@strawberry.type(
    description="The sync checkpoint of one connector for one owner. `version` and "
    "`incarnation` are what `updateSyncProgress` compares."
)
@mirrors(SyncStateRecord, types={"status": SyncStatus})
class SyncState:
    last_synced_at: str = strawberry.field(description="ISO-8601 date and time, as the seed.")
    version: int = strawberry.field(description="+1 on each applied updateSyncProgress.")
    incarnation: str = strawberry.field(
        description="New each time the row is created: a deleted and re-created state has "
        "another, so a writer holding the old one cannot land on it."
    )

    @classmethod
    def from_record(cls, record: SyncStateRecord) -> "SyncState":
        """The GraphQL view of a stored sync state."""
        return cls(**record_values(cls, record))


def sync_state_or_none(record: SyncStateRecord | None) -> SyncState | None:
    """``SyncState.from_record`` that lets None through."""
    return None if record is None else SyncState.from_record(record)


@strawberry.type
class SyncStateEdge:
    cursor: str
    node: SyncState


@strawberry.type(description="A page of one connector's sync states, ordered by owner DID.")
class SyncStateConnection:
    edges: list[SyncStateEdge]
    page_info: PageInfo
