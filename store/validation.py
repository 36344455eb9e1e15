"""Checks on values before any SQL runs. Each raises ``InvalidInput`` naming the field."""

import json
import re
from collections.abc import Callable, Collection, Sized
from datetime import datetime
from typing import Any

from store.errors import InvalidInput

MAX_EPOCH_MS = 2**53 - 1
MAX_KEY_LENGTH = 1024
MAX_JSON_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32
MAX_LIST_ITEMS = 10_000
MAX_INT32 = 2**31 - 1
MIN_LEASE_MS = 1_000
MAX_LEASE_MS = 3_600_000


def key(field: str, value: Any) -> str:
    """A required key (DID, id, token, digest): a non-empty string of at most 1024 chars,
    valid Unicode without NUL (PostgreSQL text can hold neither a NUL nor a lone surrogate)."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(field, "must be a non-empty string")
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidInput(field, f"must be at most {MAX_KEY_LENGTH} characters")
    if "\x00" in value:
        raise InvalidInput(field, "must not contain NUL characters")
    storable(field, value)
    return value


def storable(field: str, text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate cannot be stored, so it is refused."""
    try:
        return text.encode()
    except UnicodeEncodeError as error:
        raise InvalidInput(field, "must be valid Unicode (no lone surrogates)") from error


def optional_key(field: str, value: Any) -> str | None:
    """Like ``key``, but None passes."""
    return None if value is None else key(field, value)


def epoch_ms(field: str, value: Any) -> int:
    """A time in epoch milliseconds: an int from 0 to 2^53-1 (booleans refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, "must be an integer number of epoch milliseconds")
    if not 0 <= value <= MAX_EPOCH_MS:
        raise InvalidInput(field, f"must be between 0 and {MAX_EPOCH_MS}")
    return value


def optional_epoch_ms(field: str, value: Any) -> int | None:
    """Like ``epoch_ms``, but None passes."""
    return None if value is None else epoch_ms(field, value)


def count(field: str, value: Any, *, minimum: int = 0, maximum: int = MAX_INT32) -> int:
    """An int from ``minimum`` to ``maximum`` (versions, limits, statuses; 32-bit by default)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, "must be an integer")
    if not minimum <= value <= maximum:
        raise InvalidInput(field, f"must be between {minimum} and {maximum}")
    return value


def lease_ms(field: str, value: Any) -> int:
    """A lease's duration in ms, from ``MIN_LEASE_MS`` (1,000) to ``MAX_LEASE_MS`` (3,600,000)."""
    return count(field, value, minimum=MIN_LEASE_MS, maximum=MAX_LEASE_MS)


def lease_end(field: str, value: Any, now: int) -> int:
    """An absolute lease or claim deadline (epoch ms) within ``lease_ms``' bound of the
    store's ``now``: from ``now`` + ``MIN_LEASE_MS`` to ``now`` + ``MAX_LEASE_MS``, so a
    deadline holds an operation or a watch no longer than a relative lease would."""
    epoch_ms(field, value)
    if not now + MIN_LEASE_MS <= value <= now + MAX_LEASE_MS:
        raise InvalidInput(
            field,
            f"must be {MIN_LEASE_MS:,} to {MAX_LEASE_MS:,} ms after the store's now ({now})",
        )
    return int(value)


def lease_until(at_field: str, at: Any, ms_field: str, ms: Any, now: int) -> int:
    """When a lease or claim given as a deadline (``at``, ``lease_end``) or a duration
    (``ms``, ``lease_ms``) ends, counted from the store's ``now`` (epoch ms): one bound for
    both forms. Raises ``InvalidInput`` naming ``at_field`` when both or neither are given,
    or the field out of bounds."""
    if (at is None) == (ms is None):
        raise InvalidInput(at_field, f"give exactly one of {at_field} and {ms_field}")
    if ms is not None:
        return now + lease_ms(ms_field, ms)
    return lease_end(at_field, at, now)


def optional_at_or_delay(
    at_field: str,
    at: Any,
    delay_field: str,
    delay: Any,
    now: int,
    *,
    duration: Callable[[str, Any], int] = count,
) -> int | None:
    """A time (epoch ms) given either absolutely (``at``) or as ``delay`` ms after the
    store's ``now``: the relative form spares a client a ``serverTime`` round trip.
    ``duration`` checks the delay (``count``: 0 to 2**31 - 1; ``lease_ms`` for a claim's
    length). None when neither is given. Raises ``InvalidInput`` naming ``at_field`` when
    both are given, or the malformed field."""
    if at is not None and delay is not None:
        raise InvalidInput(at_field, f"give {at_field} or {delay_field}, not both")
    if delay is not None:
        return now + duration(delay_field, delay)
    return optional_epoch_ms(at_field, at)


def at_or_delay(
    at_field: str,
    at: Any,
    delay_field: str,
    delay: Any,
    now: int,
    *,
    duration: Callable[[str, Any], int] = count,
) -> int:
    """Like ``optional_at_or_delay``, but one of the two is required: neither raises
    ``InvalidInput`` naming ``at_field``."""
    time = optional_at_or_delay(at_field, at, delay_field, delay, now, duration=duration)
    if time is None:
        raise InvalidInput(at_field, f"give {at_field} or {delay_field}")
    return time


def choice(field: str, value: Any, allowed: Collection[str]) -> str:
    """One of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInput(field, f"must be one of {', '.join(sorted(allowed))}")
    return value


def optional_choice(field: str, value: Any, allowed: Collection[str]) -> str | None:
    """Like ``choice``, but None passes."""
    return None if value is None else choice(field, value, allowed)


def json_text(field: str, value: Any) -> str:
    """A JSON-encodable value, encoded as ASCII JSON (as responses carry it) of at most
    64 KiB, nested at most 32 deep (so every reader decodes it without recursing far), its
    strings valid Unicode."""
    if value is None:
        return "null"
    json_shape(field, value)
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInput(field, f"must be JSON ({error})") from error
    if len(text) > MAX_JSON_BYTES:
        raise InvalidInput(field, f"must encode to at most {MAX_JSON_BYTES} bytes of JSON")
    return text


def json_shape(field: str, value: Any) -> None:
    """Refuse lists and objects nested deeper than ``MAX_JSON_DEPTH`` and strings (keys
    included) with lone surrogates; walks without recursion."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            storable(field, item)
        elif isinstance(item, (list, tuple, dict)):
            if depth == MAX_JSON_DEPTH:
                raise InvalidInput(field, f"must be JSON nested at most {MAX_JSON_DEPTH} deep")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)


def item_count(field: str, values: Sized, *, most: int, fewest: int = 0) -> None:
    """Raise ``InvalidInput`` naming ``field`` when ``values`` holds fewer than ``fewest`` or
    more than ``most`` items (the message says how many it holds)."""
    if not fewest <= len(values) <= most:
        bounds = f"{fewest} to {most}" if fewest else f"at most {most}"
        raise InvalidInput(field, f"must hold {bounds} items, not {len(values)}")


def key_list(field: str, values: Any) -> list[str]:
    """A list of at most 10,000 keys, each checked like ``key``; a bad one is named by its
    index (``documentIDs[3]``)."""
    if not isinstance(values, (list, tuple)):
        raise InvalidInput(field, "must be a list of strings")
    item_count(field, values, most=MAX_LIST_ITEMS)
    return [key(f"{field}[{index}]", value) for index, value in enumerate(values)]


MAX_TEXT_LENGTH = 8192


def text(field: str, value: Any, *, maximum: int = MAX_TEXT_LENGTH) -> str:
    """A required free text (a URL, an error message): a non-empty string of at most
    ``maximum`` characters, storable like a key."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(field, "must be a non-empty string")
    if len(value) > maximum:
        raise InvalidInput(field, f"must be at most {maximum} characters")
    if "\x00" in value:
        raise InvalidInput(field, "must not contain NUL characters")
    storable(field, value)
    return value


def optional_text(field: str, value: Any, *, maximum: int = MAX_TEXT_LENGTH) -> str | None:
    """Like ``text``, but None passes."""
    return None if value is None else text(field, value, maximum=maximum)


def flag(field: str, value: Any) -> bool:
    """A boolean (``True``/``False`` only; 0 and 1 are refused)."""
    if not isinstance(value, bool):
        raise InvalidInput(field, "must be a boolean")
    return value


def optional_json_text(field: str, value: Any) -> str | None:
    """Like ``json_text``, but None is stored as NULL."""
    return None if value is None else json_text(field, value)


ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})")


def iso_datetime(field: str, value: Any) -> str:
    """An ISO-8601 date and time with seconds and an offset, as text
    (``2026-11-30T14:00:00.000Z``, ``2026-11-30T15:00:00+01:00``), kept as given: one
    shape, so every stored value reads alike. Raises ``InvalidInput`` otherwise (a date
    alone, week dates, no offset, a lowercase ``t`` or ``z``, an impossible date)."""
    checked = key(field, value)
    problem = "must be an ISO-8601 date and time like 2026-11-30T14:00:00.000Z"
    if not ISO_DATETIME.fullmatch(checked):
        raise InvalidInput(field, problem)
    try:
        datetime.fromisoformat(checked)
    except ValueError as error:
        raise InvalidInput(field, problem) from error
    return checked
