"""The bound the GraphQL front puts on a list variable of input objects before coercing it
(``server.errors.variables.first_oversized``: ``MAX_ITEMS``) refuses nothing the store takes: every
list of input objects in the schema is a batch's items or a call's keys, which the store
bounds at ``MAX_ITEMS``."""

from graphql import get_named_type, get_nullable_type, is_input_object_type, is_list_type

from server.errors.variables import first_oversized
from server.graph import build_schema
from server.strawberry_internals import graphql_schema
from store.items import MAX_ITEMS

BOUNDED_BY_MAX_ITEMS = {
    "ClaimOperationsInput.items",
    "MarkSendsStartedInput.items",
    "FinalizeOperationsInput.items",
    "RecordOperationsInput.items",
    "RecordVerificationsInput.items",
    "RenewLeasesInput.keys",
    "ReleaseLeasesInput.keys",
    "ForceReleaseLeasesInput.keys",
}


def lists_of_input_objects() -> set[str]:
    """Every input field and argument of the schema that takes a list of input objects."""
    schema = graphql_schema(build_schema())
    found: set[str] = set()
    for name, type_ in schema.type_map.items():
        fields = getattr(type_, "fields", {}) if not name.startswith("__") else {}
        for field_name, field in fields.items():
            typed = [(field_name, field.type)] if is_input_object_type(type_) else []
            typed += [
                (f"{field_name}({arg})", a.type) for arg, a in getattr(field, "args", {}).items()
            ]
            for at, input_type in typed:
                nullable = get_nullable_type(input_type)
                if is_list_type(nullable) and is_input_object_type(get_named_type(nullable)):
                    found.add(f"{name}.{at}")
    return found


def test_every_list_of_input_objects_is_bounded_by_max_items_in_the_store():
    assert lists_of_input_objects() == BOUNDED_BY_MAX_ITEMS


def test_first_oversized__a_batch_of_max_items_passes_and_one_more_is_refused():
    schema = graphql_schema(build_schema())
    claims = schema.type_map["ClaimOperationsInput"]
    assert first_oversized({"items": [{}] * MAX_ITEMS}, claims) is None
    assert first_oversized({"items": [{}] * (MAX_ITEMS + 1)}, claims) == (
        ["items"],
        f"must hold at most {MAX_ITEMS} items, not {MAX_ITEMS + 1}",
    )
