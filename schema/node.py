"""The Relay ``Node`` interface, opaque global ids and opaque cursors."""

import base64
import binascii
import json
from typing import Any

import strawberry

_MISSING = object()


@strawberry.interface(description="An object with a global id, fetched again by `node(id:)`.")
class Node:
    @strawberry.field
    def id(self) -> strawberry.ID:
        """``encode_global_id`` of the type's name and its ``global_key``, encoded only when a
        selection asks for it (a batch's lean selections do not)."""
        return encode_global_id(type(self).__name__, self.global_key())

    def global_key(self) -> Any:
        """The JSON value ``node(id:)`` finds the object by; each implementing type gives it.
        Raises ``NotImplementedError`` on a type that does not."""
        raise NotImplementedError(f"{type(self).__name__} gives no global key")


def encode_opaque(value: Any) -> str:
    """``value`` (any JSON value) as an opaque, URL-safe string."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_opaque(text: str) -> Any:
    """The value behind ``encode_opaque``'s string; ``_MISSING`` when it is not one."""
    try:
        padded = text + "=" * (-len(text) % 4)
        return json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, binascii.Error, RecursionError):
        return _MISSING


def encode_global_id(type_name: str, key: Any) -> strawberry.ID:
    """An opaque id for ``key`` (any JSON value) of ``type_name``."""
    return strawberry.ID(encode_opaque([type_name, key]))


def decode_global_id(global_id: str) -> tuple[str, Any] | None:
    """The ``(type_name, key)`` behind an id, or None when it is not one of ours."""
    value = decode_opaque(global_id)
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
        return value[0], value[1]
    return None


def decode_cursor(cursor: str, arity: int) -> list[Any] | None:
    """The key list behind a cursor of ``arity`` items, or None when malformed."""
    value = decode_opaque(cursor)
    if isinstance(value, list) and len(value) == arity:
        return value
    return None
