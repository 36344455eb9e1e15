"""Typed errors the store raises for input it refuses. Nothing is written when one is raised."""


class StoreError(Exception):
    """A request the store refuses."""


class InvalidInput(StoreError):
    """A value the store cannot take. ``field`` names it in the seed's spelling (``callerDID``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ReservedValue(InvalidInput):
    """A value the store keeps for itself, such as the contested send marker."""


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
