"""Enums; their values are the store's spellings, their GraphQL names UPPER_SNAKE."""

from enum import Enum

import strawberry


@strawberry.enum(description="Where an operation is in its life; all but ATTEMPTED are final.")
class OperationState(Enum):
    ATTEMPTED = "attempted"
    COMMITTED = "committed"
    FAILED = "failed"
    SUPERSEDED = "superseded"


@strawberry.enum(
    description="Where an ATTEMPTED operation stands now (at the store's clock); each stands in "
    "exactly one."
)
class OperationRun(Enum):
    LEASED = strawberry.enum_value("leased", description="A worker holds its lease (not lapsed).")
    DUE = strawberry.enum_value(
        "due",
        description="Its lease is free and its next attempt null or come: a worker may lease it "
        "once its account allows (not paused, below its cap, not throttled).",
    )
    SCHEDULED = strawberry.enum_value(
        "scheduled",
        description="Its lease is free and its next attempt later, not deferred: a retry or a "
        "delay.",
    )
    DEFERRED = strawberry.enum_value(
        "deferred",
        description="Its lease is free and its next attempt later, deferred (deferReason: "
        "offline or auth).",
    )


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


@strawberry.enum(description="What a write did to an operation (its event's action).")
class OperationAction(Enum):
    CLAIMED = strawberry.enum_value("claimed", description="A fresh claim created it.")
    LEASED = strawberry.enum_value("leased", description="A lease was taken on it.")
    TAKEN_OVER = strawberry.enum_value(
        "taken_over", description="A lease was taken over from another token's lapsed lease."
    )
    RELEASED = strawberry.enum_value("released", description="Its lease was released.")
    SEND_MARKED = strawberry.enum_value("send_marked", description="A run marked its send.")
    DEFERRED = strawberry.enum_value("deferred", description="It was rescheduled.")
    RECORDED = strawberry.enum_value("recorded", description="An attempt's outcome was recorded.")
    FINALIZED = strawberry.enum_value("finalized", description="It was committed.")
    CANCELLED = strawberry.enum_value("cancelled", description="An operator cancelled it.")
    REISSUED = strawberry.enum_value(
        "reissued", description="An operator reissued it (on the original and on the new one)."
    )
    FORCE_RELEASED = strawberry.enum_value(
        "force_released", description="An operator freed its lease."
    )
    RESUMED = strawberry.enum_value(
        "resumed", description="A resume made it due (deferred offline or auth, or paused)."
    )


@strawberry.enum(description="What a write did to a watch (its event's action).")
class WatchAction(Enum):
    OPENED = strawberry.enum_value(
        "opened", description="A repair generation was opened (finalize, arm or ingress)."
    )
    COALESCED = strawberry.enum_value(
        "coalesced", description="An ingress moved a pending watch's due time earlier."
    )
    CLAIMED = strawberry.enum_value("claimed", description="A verifier claimed an attempt.")
    DEFERRED = strawberry.enum_value("deferred", description="A claimed attempt was rescheduled.")
    VERIFIED = strawberry.enum_value("verified", description="A verification matched.")
    PENDING = strawberry.enum_value(
        "pending", description="A verification did not match; it is due again."
    )
    REPAIR_FAILED = strawberry.enum_value(
        "repair_failed", description="A verification used up its attempts."
    )
    REARMED = strawberry.enum_value(
        "rearmed", description="An operator opened a new generation on it."
    )
    RESUMED = strawberry.enum_value("resumed", description="A resume made it due.")


@strawberry.enum(
    description="What may make a reissue send a write twice; reissueOperations leaves an "
    "operation holding one out unless its `include` names it."
)
class ReissueRisk(Enum):
    CANCELLED = strawberry.enum_value(
        "cancelled", description="An operator cancelled it (its lastKind is `cancelled`)."
    )
    OUTCOME_UNKNOWN = strawberry.enum_value(
        "outcome_unknown",
        description="It failed while its last send was marked and no answer was recorded for "
        "that send (its sendMarker is still set): cancelled after a marked send, or failed "
        "after an abandoned run. The provider may hold the write.",
    )
