"""Building GraphQL objects from store records."""

import dataclasses
from typing import Any, TypeVar

_T = TypeVar("_T")


def from_record(cls: type[_T], record: Any, **overrides: Any) -> _T:
    """An instance of the Strawberry type ``cls`` whose fields take the record's same-named
    attributes, except those given in ``overrides`` (ids, enums)."""
    names = {field.name for field in dataclasses.fields(cls) if field.init}  # type: ignore[arg-type]
    values = {name: getattr(record, name) for name in names - overrides.keys()}
    return cls(**values, **overrides)
