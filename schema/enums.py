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


@strawberry.enum(
    description="Why a watch is armed: new ingress moved the document's winner, or by hand."
)
class ArmReason(Enum):
    INGRESS = "ingress"
    MANUAL = "manual"


@strawberry.enum(description="What an arm did to a watch.")
class ArmOutcome(Enum):
    OPENED = strawberry.enum_value("opened", description="A new repair generation was opened.")
    COALESCED = strawberry.enum_value(
        "coalesced", description="The pending generation is kept, due at the earlier time."
    )
    NOOP = strawberry.enum_value("noop", description="Nothing changed (or there is no watch).")


@strawberry.enum(description="What a recorded verification did to a watch.")
class VerificationOutcome(Enum):
    VERIFIED = strawberry.enum_value(
        "verified", description="The provider holds the current winner: both watermarks set."
    )
    PENDING = strawberry.enum_value(
        "pending", description="A mismatch below maxAttempts: counted and rescheduled."
    )
    REPAIR_FAILED = strawberry.enum_value(
        "repair_failed", description="A mismatch reaching maxAttempts: the watch gave up."
    )
    STALE_GENERATION = strawberry.enum_value(
        "stale-generation", description="No watch, or another generation: nothing written."
    )
    STALE_CLAIM = strawberry.enum_value(
        "stale-claim", description="The claim is not the one given: nothing written."
    )


def value_of(member: Enum | None) -> str | None:
    """The store's spelling of an enum member, or None."""
    return None if member is None else member.value


@strawberry.enum(description="Where a connector's sync for one owner stands.")
class SyncStatus(Enum):
    IDLE = "idle"
    SYNCING = "syncing"
    ERROR = "error"
