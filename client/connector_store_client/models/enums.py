from enum import Enum


class DeferReason(str, Enum):
    OFFLINE = "OFFLINE"
    AUTH = "AUTH"


class OperationAction(str, Enum):
    CLAIMED = "CLAIMED"
    LEASED = "LEASED"
    TAKEN_OVER = "TAKEN_OVER"
    RELEASED = "RELEASED"
    SEND_MARKED = "SEND_MARKED"
    DEFERRED = "DEFERRED"
    RECORDED = "RECORDED"
    FINALIZED = "FINALIZED"
    CANCELLED = "CANCELLED"
    REISSUED = "REISSUED"
    FORCE_RELEASED = "FORCE_RELEASED"
    RESUMED = "RESUMED"


class OperationRun(str, Enum):
    LEASED = "LEASED"
    DUE = "DUE"
    SCHEDULED = "SCHEDULED"
    DEFERRED = "DEFERRED"


class OperationState(str, Enum):
    ATTEMPTED = "ATTEMPTED"
    COMMITTED = "COMMITTED"
    FAILED = "FAILED"
    SUPERSEDED = "SUPERSEDED"
