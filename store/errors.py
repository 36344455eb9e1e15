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
