"""Checks of the ``Worker``'s arguments: each raises ``ValueError`` naming the argument."""

import math
from typing import Any


def whole(name: str, value: Any, lowest: int, highest: int | None = None) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int from ``lowest`` to
    ``highest`` (None: no bound)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < lowest
        or (highest is not None and value > highest)
    ):
        bound = f"from {lowest} to {highest}" if highest is not None else f"of at least {lowest}"
        raise ValueError(f"{name} must be an integer {bound}, not {value!r}")


def seconds(name: str, value: Any, *, positive: bool) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite number of seconds,
    above 0 (``positive``) or at least 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        bound = "above 0" if positive else "of at least 0"
        raise ValueError(f"{name} must be a finite number of seconds {bound}, not {value!r}")
