"""``schema.leaf_inputs.leaf_input`` builds an input as Strawberry's own conversion does."""

import dataclasses
import enum
from typing import Any

import pytest
import strawberry
from strawberry.schema.config import StrawberryConfig

from schema.leaf_inputs import NotALeafInput, items_input, leaf_input
from schema.names import SeedNameConverter
from schema.scalars import JSON, SCALAR_MAP, EpochMillis


@strawberry.enum
class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@strawberry.input
class Fields:
    caller_did: str
    due_at: EpochMillis
    payload: JSON | None = None
    colors: list[Color] | None = None
    document_ids: list[str] | None = strawberry.field(default_factory=lambda: ["x"])
    note: str | None
    count: int = 3


@strawberry.input
class PlainInput(Fields):
    pass


@leaf_input
@strawberry.input
class LeafInput(Fields):
    pass


@strawberry.input
class PlainItems:
    items: list[PlainInput]
    more: list[PlainInput] | None = None


@items_input
@strawberry.input
class LeafItems:
    items: list[LeafInput]
    more: list[LeafInput] | None = None


def items_of(input: PlainItems | LeafItems) -> JSON:
    return {
        "items": [(type(item).__name__, dataclasses.asdict(item)) for item in input.items],
        "more": None if input.more is None else [dataclasses.asdict(item) for item in input.more],
    }


@strawberry.type
class Query:
    @strawberry.field
    def plain_items(self, input: PlainItems) -> JSON:
        assert type(input) is PlainItems
        return items_of(input)

    @strawberry.field
    def leaf_items(self, input: LeafItems) -> JSON:
        assert type(input) is LeafItems
        return items_of(input)

    @strawberry.field
    def plain(self, input: PlainInput) -> JSON:
        assert type(input) is PlainInput
        return dataclasses.asdict(input)

    @strawberry.field
    def leaf(self, input: LeafInput) -> JSON:
        assert type(input) is LeafInput
        return dataclasses.asdict(input)

    @strawberry.field
    def leaves(self, input: list[LeafInput]) -> JSON:
        return [dataclasses.asdict(item) for item in input]


SCHEMA = strawberry.Schema(
    Query,
    config=StrawberryConfig(name_converter=SeedNameConverter()),
    scalar_overrides=SCALAR_MAP,
)


def both(value: dict[str, Any]) -> tuple[Any, Any]:
    result = SCHEMA.execute_sync(
        "query ($p: PlainInput!, $l: LeafInput!) { plain(input: $p) leaf(input: $l) }",
        variable_values={"p": value, "l": value},
    )
    assert result.errors is None, result.errors
    assert result.data is not None
    return result.data["plain"], result.data["leaf"]


@pytest.mark.parametrize(
    "value",
    [
        {"callerDID": "did:a", "dueAt": 5},
        {"callerDID": "did:a", "dueAt": 5, "note": None, "payload": {"a": [1, None]}},
        {"callerDID": "did:a", "dueAt": 0, "colors": ["RED", "BLUE"], "documentIDs": []},
        {"callerDID": "did:a", "dueAt": 7, "colors": None, "documentIDs": None, "count": 9},
        {"callerDID": "did:a", "dueAt": 7, "note": "n", "payload": "text"},
    ],
)
def test_leaf_input__builds_what_strawberry_builds(value: dict[str, Any]) -> None:
    plain, leaf = both(value)
    assert leaf == plain


def test_leaf_input__enum_members_and_literal_values() -> None:
    result = SCHEMA.execute_sync(
        '{ leaves(input: [{callerDID: "did:a", dueAt: 1, colors: [BLUE]},'
        ' {callerDID: "did:b", dueAt: 2}]) }'
    )
    assert result.errors is None, result.errors
    assert result.data is not None
    first, second = result.data["leaves"]
    assert first["colors"] == [Color.BLUE] and first["note"] is None and first["count"] == 3
    assert second["caller_did"] == "did:b" and second["document_ids"] == ["x"]


def test_leaf_input__lists_copied_names_of_another_converter() -> None:
    given = ["a", "b"]
    kept: list[LeafInput] = []

    @strawberry.type
    class Keep:
        @strawberry.field
        def keep(self, input: LeafInput) -> int:
            kept.append(input)
            return 1

    schema = strawberry.Schema(Keep, scalar_overrides=SCALAR_MAP)
    result = schema.execute_sync(
        "query ($i: LeafInput!) { keep(input: $i) }",
        variable_values={"i": {"callerDid": "did:a", "dueAt": 1, "documentIds": given}},
    )
    assert result.errors is None, result.errors
    assert kept[0].document_ids == given and kept[0].document_ids is not given
    assert kept[0].caller_did == "did:a"


def test_leaf_input__nested_input_refused() -> None:
    @strawberry.input
    class Inner:
        name: str

    with pytest.raises(NotALeafInput, match="outer"):

        @leaf_input
        @strawberry.input
        class Outer:
            outer: Inner


def test_leaf_input__output_type_refused() -> None:
    @strawberry.type
    class Output:
        name: str

    with pytest.raises(NotALeafInput, match="no input type"):
        leaf_input(Output)


@pytest.mark.parametrize(
    "value",
    [
        {"items": [{"callerDID": "did:a", "dueAt": 5}]},
        {
            "items": [
                {"callerDID": "did:a", "dueAt": 0, "colors": ["RED"], "documentIDs": []},
                {"callerDID": "did:b", "dueAt": 7, "note": "n", "payload": {"a": [1]}},
            ],
            "more": [{"callerDID": "did:c", "dueAt": 1, "count": 9}],
        },
        {"items": [], "more": None},
    ],
)
def test_items_input__builds_what_strawberry_builds(value: dict[str, Any]) -> None:
    result = SCHEMA.execute_sync(
        "query ($p: PlainItems!, $l: LeafItems!) { plainItems(input: $p) leafItems(input: $l) }",
        variable_values={"p": value, "l": value},
    )
    assert result.errors is None, result.errors
    assert result.data is not None
    plain, leaf = result.data["plainItems"], result.data["leafItems"]
    assert [fields for _, fields in leaf["items"]] == [fields for _, fields in plain["items"]]
    assert {kind for kind, _ in leaf["items"]} <= {"LeafInput"}
    assert leaf["more"] == plain["more"]


def test_items_input__a_list_of_other_inputs_refused() -> None:
    with pytest.raises(NotALeafInput, match="items"):

        @items_input
        @strawberry.input
        class Batch:
            items: list[PlainInput]
