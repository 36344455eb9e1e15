"""Custom scalars: ``EpochMillis`` (a time in epoch ms) and ``JSON``."""

from typing import Any, NewType

import strawberry
from graphql import IntValueNode, ValueNode
from strawberry.scalars import JSON
from strawberry.types.scalar import ScalarDefinition

MAX_EPOCH_MS = 2**53 - 1

EPOCH_MILLIS_SPEC = "docs/scalars.md#epochmillis"
"""Where ``EpochMillis`` is defined: this repository's ``docs/scalars.md`` (a relative URL, so
the schema names no host)."""

EpochMillis = NewType("EpochMillis", int)
"""Milliseconds since the Unix epoch, 0 to 2^53-1 (GraphQL ``Int`` is 32-bit)."""


def parse_epoch_millis(value: Any) -> int:
    """Accept an int from 0 to 2^53-1; refuse floats (even 1.0), booleans and strings."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"EpochMillis must be an integer, got {type(value).__name__}")
    if not 0 <= value <= MAX_EPOCH_MS:
        raise ValueError(f"EpochMillis must be between 0 and {MAX_EPOCH_MS}")
    return value


def parse_epoch_millis_literal(node: ValueNode, _variables: Any = None) -> int:
    """Accept an integer literal only."""
    if not isinstance(node, IntValueNode):
        raise ValueError("EpochMillis must be an integer literal")
    return parse_epoch_millis(int(node.value))


EPOCH_MILLIS = strawberry.scalar(
    name="EpochMillis",
    description="Milliseconds since the Unix epoch, as a JSON integer from 0 to 2^53-1.",
    specified_by_url=EPOCH_MILLIS_SPEC,
    serialize=int,
    parse_value=parse_epoch_millis,
    parse_literal=parse_epoch_millis_literal,
)

SCALAR_MAP: dict[object, ScalarDefinition] = {EpochMillis: EPOCH_MILLIS}

__all__ = ["JSON", "SCALAR_MAP", "EpochMillis"]
