"""Enums; their values are the store's spellings, their GraphQL names UPPER_SNAKE."""

from enum import Enum

import strawberry


@strawberry.enum(description="Where an operation is in its life; all but ATTEMPTED are final.")
class OperationState(Enum):
    ATTEMPTED = "attempted"
    COMMITTED = "committed"
    FAILED = "failed"
    SUPERSEDED = "superseded"


@strawberry.enum(description="Why an operation or watch waits: the provider is offline or auth.")
class DeferReason(Enum):
    OFFLINE = "offline"
    AUTH = "auth"


@strawberry.enum(description="A watch's verify/repair status.")
class VerificationStatus(Enum):
    PENDING_VERIFICATION = "pending_verification"
    VERIFIED = "verified"
    REPAIR_FAILED = "repair_failed"


def value_of(member: Enum | None) -> str | None:
    """The store's spelling of an enum member, or None."""
    return None if member is None else member.value


@strawberry.enum(description="Where a connector's sync for one owner stands.")
class SyncStatus(Enum):
    IDLE = "idle"
    SYNCING = "syncing"
    ERROR = "error"
