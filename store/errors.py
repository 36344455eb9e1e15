"""Typed errors the store raises. Nothing is written when one is raised.

``InvalidInput`` (and ``ReservedValue``) are the caller's mistakes. ``DatabaseUnavailable``
(and ``DatabaseBusy``) say the database could not serve the call right now; they are raised
from the driver's error once, in ``store.database``, with the driver's error as the cause.
"""


class StoreError(Exception):
    """A request the store refuses or cannot serve."""


class InvalidInput(StoreError):
    """A value the store cannot take. ``field`` names it in the seed's spelling (``callerDID``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ReservedValue(InvalidInput):
    """A value the store keeps for itself, such as the contested send marker."""


class DatabaseUnavailable(StoreError):
    """The database cannot be reached or used: refused or lost connections, a database that
    does not exist, a SQLite file that cannot be opened or was removed. Retrying later may
    succeed; nothing of the call was written."""


class DatabaseBusy(DatabaseUnavailable):
    """The database is up but the call waited too long: for a pooled connection, for the
    SQLite write lock, or for a row lock (a deadlock or serialization failure included)."""


class ClaimContended(StoreError):
    """A claim's statement met what a concurrent claim or collection committed since its
    snapshot (``store.claims``): it wrote nothing, and runs again."""

    SQLSTATE = "KC409"
    """What migration 0020's ``kubun_connector_claimed_alone`` raises."""


class CasRetriesExhausted(StoreError):
    """A multi-statement decision (``arm_watch``, ``record_verification``,
    ``record_ingress``) lost its compare-and-set on every retry; nothing was written.

    ``method`` names the store method, ``attempts`` how many transactions it ran. The caller
    may try again.
    """

    def __init__(self, method: str, attempts: int) -> None:
        super().__init__(f"{method}: the compare-and-set failed after {attempts} attempts")
        self.method = method
        self.attempts = attempts


class EventsCollected(StoreError):
    """A read of an event log after ``after`` (a ``sequence``) whose following events were
    collected in part (``store.events``): what came after it is no longer whole, so the
    reader must start again from the rows, not resume."""

    def __init__(self, after: str) -> None:
        super().__init__(f"after: events after {after} were collected")
        self.after = after
