"""GraphQL types and inputs derived from the store's records, so each record's fields are
written once (in ``store/records.py``).

``mirrors(Record, …)`` is a class decorator put below ``strawberry.type``/``strawberry.input``:
it writes the class's annotations from the record's fields, in the record's order, before
Strawberry reads them. Each field's GraphQL type follows from its Python type (``EpochMs``
becomes ``EpochMillis``, ``JsonValue`` becomes ``JSON``, ``X | None`` stays nullable); an
entry of ``types`` names another one (an enum). A field the class annotates itself (to give
it a description) keeps the record's place; ``omit`` leaves record fields out, each for a
reason said where it is used. The conversion from a record is ``record_values``: it names
every mirrored field, converts enums by ``types``, and raises for a field it cannot fill. A
type that holds its record (``RecordView``) reads each mirrored field from it when asked
instead, so building one copies nothing.
"""

import dataclasses
import inspect
from collections.abc import Callable, Collection, Mapping
from enum import Enum
from types import NoneType, UnionType
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin

from schema.scalars import JSON, EpochMillis
from store.records import EpochMs, JsonValue

_T = TypeVar("_T")
_V = TypeVar("_V", bound="RecordView")

MIRRORED = "__mirrored_fields__"
"""The class attribute naming the record fields a mirrored class carries, in order, each
with the enum its GraphQL type is (or None), as a dict."""


class RecordMismatch(TypeError):
    """A mirrored class and its record do not fit: a name that is no field of the record,
    or a record type with no GraphQL counterpart."""


def graphql_type(python_type: Any) -> Any:
    """The GraphQL annotation of a record field's Python type."""
    if python_type == EpochMs:
        return EpochMillis
    if python_type == JsonValue:
        return JSON | None
    origin = get_origin(python_type)
    if origin in (Union, UnionType):
        inner = [arg for arg in get_args(python_type) if arg is not NoneType]
        if len(inner) == 1 and NoneType in get_args(python_type):
            return graphql_type(inner[0]) | None
    if python_type in (str, int, bool) or python_type == list[str]:
        return python_type
    raise RecordMismatch(f"no GraphQL type for {python_type!r}")


def mirrors(
    record: type,
    *,
    types: Mapping[str, Any] | None = None,
    omit: Collection[str] = (),
    defaults: bool = False,
) -> Callable[[type[_T]], type[_T]]:
    """Give the decorated class one field per field of the dataclass ``record`` (except
    ``omit``), typed by ``types`` or by ``graphql_type``; with ``defaults``, a record
    field's default becomes the GraphQL field's (for inputs). The class's own annotations of
    names the record lacks (``strawberry.Private`` values) follow the record's. Raises
    ``RecordMismatch`` when ``types`` or ``omit`` name a field the record lacks, or a field's
    type has no GraphQL counterpart."""
    overrides = dict(types or {})

    def decorate(cls: type[_T]) -> type[_T]:
        fields = {field.name: field for field in dataclasses.fields(record)}
        unknown = (overrides.keys() | set(omit)) - fields.keys()
        if unknown:
            raise RecordMismatch(f"{cls.__name__}: {sorted(unknown)} are no fields of {record}")
        own = dict(inspect.get_annotations(cls))
        annotations: dict[str, Any] = {}
        mirrored: list[str] = []
        for name, field in fields.items():
            if name in omit:
                continue
            mirrored.append(name)
            if name in own:
                annotations[name] = own.pop(name)
                continue
            annotations[name] = overrides.get(name) or graphql_type(field.type)
            if defaults and field.default is not dataclasses.MISSING:
                setattr(cls, name, field.default)
        annotations |= own
        cls.__annotations__ = annotations
        setattr(cls, MIRRORED, {name: _enum_of(annotations[name]) for name in mirrored})
        return cls

    return decorate


def record_values(cls: type, record: object) -> dict[str, Any]:
    """The values of ``cls``'s mirrored fields taken from ``record``, an enum field's as
    its member. Raises ``RecordMismatch`` when ``cls`` mirrors no record."""
    fields = getattr(cls, MIRRORED, None)
    if fields is None:
        raise RecordMismatch(f"{cls.__name__} mirrors no record")
    values = {name: getattr(record, name) for name in fields}
    for name, enum in fields.items():
        if enum is not None and values[name] is not None:
            values[name] = enum(values[name])
    return values


class RecordView:
    """The base of a mirrored type that holds its record in ``record`` (a
    ``strawberry.Private`` field of its own): ``view`` builds one from the record alone, and
    each mirrored field is read from the record when a selection (or any code) asks for it,
    an enum field's as its member, as ``record_values`` gives it. A batch's lean selections
    read one or two of an operation's thirty fields: the rest are never copied."""

    @classmethod
    def view(cls: type[_V], record: object) -> _V:
        """The view of ``record`` (its dataclass fields left unset: they are read through)."""
        made = cls.__new__(cls)
        made.__dict__["record"] = record
        return made

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            """A mirrored field's value, read from the record; ``AttributeError`` for any
            other name (only names the instance lacks come here)."""
            fields = getattr(type(self), MIRRORED, {})
            if name not in fields or "record" not in self.__dict__:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            value = getattr(self.__dict__["record"], name)
            enum = fields[name]
            return value if enum is None or value is None else enum(value)


def _enum_of(annotation: Any) -> type[Enum] | None:
    """The enum ``annotation`` names (alone or as ``Enum | None``), or None."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, Enum):
            return candidate
    return None
