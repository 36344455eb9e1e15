"""One definition per record (store/records.py): the GraphQL types and inputs derived from a
record carry exactly its fields, the tables (and through test_migrations the migrations)
hold exactly its columns, and a derivation that cannot fit refuses loudly."""

import dataclasses
from types import NoneType, SimpleNamespace
from typing import Any, get_args

import pytest
import strawberry

from resolvers import fields
from resolvers.mutations import to_claim, to_finalize
from schema.enums import OperationState
from schema.names import to_graphql_name
from schema.operation import Operation
from schema.records import RecordMismatch, mirrors, record_values
from server.graph import build_schema
from store import tables
from store.operations import Finalize
from store.records import (
    OPERATION_FIELDS,
    AccountRecord,
    JsonValue,
    OperationClaim,
    OperationRecord,
    PendingAuthRecord,
    SyncStateRecord,
    WatchIdentity,
    WatchRecord,
    row_reader,
)
from tests.factories import claim


def graphql_names(record: type, *, but: frozenset[str] = frozenset()) -> set[str]:
    return {to_graphql_name(field.name) for field in dataclasses.fields(record)} - but


def schema_fields(type_name: str) -> set[str]:
    for kind in build_schema().introspect()["__schema"]["types"]:
        if kind["name"] == type_name:
            return {field["name"] for field in kind["fields"] or kind["inputFields"]}
    raise AssertionError(f"no type {type_name}")


@pytest.mark.parametrize(
    ("type_name", "record", "expected_extra"),
    [
        ("Operation", OperationRecord, {"id", "watch", "events"}),
        ("Watch", WatchRecord, {"id", "operations", "events"}),
        ("ConsumedPendingAuth", PendingAuthRecord, set()),
        ("SyncState", SyncStateRecord, set()),
        ("ClaimOperationInput", OperationClaim, set()),
        ("FinalizeOperationInput", Finalize, {"delayMs"}),
        ("WatchIdentityInput", WatchIdentity, set()),
    ],
)
def test_schema_type__has_every_field_of_its_record(type_name, record, expected_extra):
    assert schema_fields(type_name) == graphql_names(record) | expected_extra


def test_pending_auth__has_every_field_of_its_record_but_the_secret():
    assert schema_fields("PendingAuth") == graphql_names(
        PendingAuthRecord, but=frozenset({"codeVerifier"})
    )


RECORD_TABLES = [
    (OperationRecord, tables.operation, {}),
    (WatchRecord, tables.projection_watch, {}),
    (PendingAuthRecord, tables.pending_auth, {"incremental": "is_incremental"}),
    (SyncStateRecord, tables.sync_state, {}),
    (AccountRecord, tables.account, {}),
]


@pytest.mark.parametrize(("record", "table", "renamed"), RECORD_TABLES)
def test_record__has_every_column_of_its_table(record, table, renamed):
    columns = {renamed.get(field.name, field.name) for field in dataclasses.fields(record)}

    assert columns == set(table.c.keys())


@pytest.mark.parametrize(("record", "table", "renamed"), RECORD_TABLES)
def test_record__nullable_where_its_column_is(record, table, renamed):
    """JSON fields are any JSON value, null included, whatever the column (a stored JSON
    ``null`` is the text ``null``)."""
    for field in dataclasses.fields(record):
        if field.type != JsonValue:
            column = table.c[renamed.get(field.name, field.name)]
            assert (NoneType in get_args(field.type)) == column.nullable, field.name


@dataclasses.dataclass(frozen=True)
class Gadget:
    name: str
    size: int | None
    tags: dict[str, int]


def test_mirrors__refuses_an_omitted_name_the_record_lacks():
    with pytest.raises(RecordMismatch, match="colour"):
        mirrors(WatchIdentity, omit={"colour"})(type("Shape", (), {}))


def test_mirrors__refuses_a_typed_name_the_record_lacks():
    with pytest.raises(RecordMismatch, match="colour"):
        mirrors(WatchIdentity, types={"colour": str})(type("Shape", (), {}))


def test_mirrors__refuses_a_field_type_graphql_cannot_carry():
    with pytest.raises(RecordMismatch, match="dict"):
        mirrors(Gadget)(type("GadgetType", (), {}))


def test_mirrors__a_new_record_field_reaches_the_type_and_its_values():
    @strawberry.type
    @mirrors(Gadget, omit={"tags"})
    class GadgetType:
        pass

    gadget = Gadget(name="g", size=None, tags={})
    made: Any = GadgetType(**record_values(GadgetType, gadget))

    assert (made.name, made.size) == ("g", None)


def test_record_values__refuses_a_type_that_mirrors_no_record():
    with pytest.raises(RecordMismatch, match="mirrors no record"):
        record_values(type("Loose", (), {}), Gadget(name="g", size=1, tags={}))


def stored_operation() -> OperationRecord:
    stored: dict[str, Any] = {
        "node_key": "node-1",
        "state": "attempted",
        "incarnation": "inc-1",
        "lease_token": "lease-A",
        "lease_expires_at": 9,
        "created_at": 1,
        "updated_at": 2,
        "defer_reason": "auth",
        "result_entity": {"id": "remote-1"},
    }
    claimed = claim()
    for name in OPERATION_FIELDS:
        if name not in stored and hasattr(claimed, name):
            stored[name] = getattr(claimed, name)
    return OperationRecord(**stored)


def test_record_view__reads_every_mirrored_field_as_record_values_gives_it():
    record = stored_operation()

    view = Operation.from_record(record)

    assert {name: getattr(view, name) for name in record_values(Operation, record)} == (
        record_values(Operation, record)
    )
    assert view.state is OperationState.ATTEMPTED


def test_record_view__refuses_a_name_it_does_not_mirror():
    view: Any = Operation.from_record(stored_operation())

    with pytest.raises(AttributeError, match="colour"):
        view.colour  # noqa: B018


ROW = {name: getattr(stored_operation(), name) for name in OPERATION_FIELDS} | {
    "reissue_intent": '{"why": "again"}',
    "result_entity": None,
}
"""A stored operation's row as the driver gives it: the JSON columns as text (NULL: None)."""


@pytest.mark.parametrize(
    "row",
    [
        ROW,
        ROW | {"row_bytes": 412, "prior_token": None},
        dict(reversed(ROW.items())),
        dict(reversed(ROW.items())) | {"row_bytes": 412},
    ],
    ids=["whole", "with columns after it", "in another order", "in another order, with more"],
)
def test_row_reader__reads_the_records_columns_of_any_row(row):
    values = row_reader(OPERATION_FIELDS, ("reissue_intent", "result_entity"))(row)

    assert values == ROW | {"reissue_intent": {"why": "again"}}
    assert list(values) == list(OPERATION_FIELDS)


def test_row_reader__refuses_a_row_missing_a_column():
    row = {name: value for name, value in ROW.items() if name != "state"} | {"row_bytes": 1}

    with pytest.raises(KeyError, match="state"):
        row_reader(OPERATION_FIELDS)(row)


FINALIZE = Finalize(
    "did:key:caller",
    "op-1",
    version=2,
    lease_token="lease-A",
    due_at=5,
    result_entity={"id": "remote-1"},
    provider_etag="etag-1",
    document_id="doc-1",
)
"""A finalize with no field at its default, so a field ``to_finalize`` dropped shows."""


def finalize_of(given: Any) -> Finalize:
    """``to_finalize`` of an input holding ``given``'s fields and no ``delayMs`` (the watch
    due at the ``dueAt`` given)."""
    fields = {field.name: getattr(given, field.name) for field in dataclasses.fields(given)}
    return to_finalize(SimpleNamespace(**fields, delay_ms=None), 0)  # type: ignore[arg-type]


TO_RECORD = [(to_claim, claim()), (finalize_of, FINALIZE)]


@pytest.mark.parametrize(("convert", "wanted"), TO_RECORD)
def test_to_record__takes_every_record_field(convert, wanted):
    assert convert(wanted) == wanted


@pytest.mark.parametrize(("convert", "wanted"), TO_RECORD)
def test_to_record__refuses_an_input_missing_a_record_field(convert, wanted):
    @dataclasses.dataclass
    class Partial:
        caller_did: str = "did:key:caller"

    with pytest.raises(AttributeError, match="operation_id"):
        convert(Partial())


def test_watch_identity_of__reads_the_five_parts():
    operation = claim()

    assert WatchIdentity.of(operation) == WatchIdentity(
        "did:key:owner", "calendar", "Event", "acct-1", "evt-1"
    )


def test_watch_identity_of__refuses_a_holder_missing_a_part():
    with pytest.raises(AttributeError, match="owner_did"):
        WatchIdentity.of(Gadget(name="g", size=1, tags={}))


def test_typed_field_decorators__are_strawberrys_own():
    """resolvers/fields.py only restates the type of Strawberry's decorators: the method
    still becomes a field with its arguments and description."""

    @strawberry.type
    class Query:
        @fields.query(description="Doubles n.")
        def double(self, n: int) -> int:
            return 2 * n

    @strawberry.type
    class Mutation:
        @fields.mutation(description="Echoes n.")
        def echo(self, n: int) -> int:
            return n

    schema = strawberry.Schema(query=Query, mutation=Mutation)

    assert schema.execute_sync("{ double(n: 2) }").data == {"double": 4}
    assert schema.execute_sync("mutation { echo(n: 3) }").data == {"echo": 3}
    assert '"""Doubles n."""' in schema.as_str() and '"""Echoes n."""' in schema.as_str()
