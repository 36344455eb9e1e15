"""JSON as JSON defines it: Python's parser takes more (a key twice, ``NaN``, numbers
past a double's range), which a request must not depend on."""

import json
import math
from typing import Any


class NotJson(json.JSONDecodeError):
    """Text Python's parser reads that JSON refuses; its ``msg`` says why."""

    def __init__(self, why: str) -> None:
        super().__init__(why, "", 0)


class DuplicateKey(NotJson):
    """Raised by ``unique_keys`` for a JSON object that names one key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {json.dumps(key)} appears twice in one object")


def not_a_number(constant: str) -> float:
    """``json.loads``' ``parse_constant``: ``NaN``, ``Infinity`` and ``-Infinity`` are not
    JSON. Raises ``NotJson``."""
    raise NotJson(f"{constant} is not a JSON number")


def finite(text: str) -> float:
    """``json.loads``' ``parse_float``: a number past a double's range (``1e999``) would
    read as infinity, which no field takes. Raises ``NotJson``."""
    number = float(text)
    if math.isinf(number):
        raise NotJson(f"{text} is too large a number")
    return number


STRICT_JSON: dict[str, Any] = {"parse_constant": not_a_number, "parse_float": finite}
"""``json.loads``' hooks that refuse what JSON does not have (``NotJson``)."""


def strict_loads(data: str | bytes, **hooks: Any) -> Any:
    """``json.loads`` with ``STRICT_JSON`` and ``hooks``; ``bytes`` are read as UTF-8
    (JSON's encoding between systems, and the request's charset; a leading byte order mark
    is skipped), never guessed as UTF-16 or UTF-32. Raises ``JSONDecodeError`` (text that
    is not JSON) or ``NotJson``: bytes that are not UTF-8, and text Python cannot read (an
    integer past its digit limit, nesting past its recursion limit)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise NotJson(
                f"the body is not UTF-8 (byte {error.object[error.start]:#04x} at offset "
                f"{error.start})"
            ) from error
    try:
        return json.loads(data, **STRICT_JSON, **hooks)
    except json.JSONDecodeError:
        raise
    except ValueError as error:
        raise NotJson("a number has more digits than this server reads") from error
    except RecursionError as error:
        raise NotJson("the JSON is nested too deeply") from error


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """One JSON object's members as a dict (``json.loads``' ``object_pairs_hook``).

    Raises ``DuplicateKey`` where a key appears twice."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return value
