"""store/validation.py: pure checks, no database. Each refusal is an ``InvalidInput`` that names
the field it was given."""

import json

import pytest

from store import validation as check
from store.errors import InvalidInput, ReservedValue, StoreError

NOT_STRINGS = [None, 1, 1.0, b"bytes", ["a"], {"a": 1}, True]


def refused(call, *args, field="theField", **kwargs):
    """Call ``call(field, *args)`` and return the ``InvalidInput`` it must raise."""
    with pytest.raises(InvalidInput) as raised:
        call(field, *args, **kwargs)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")
    return raised.value


# --- errors ----------------------------------------------------------------------------------


def test_invalid_input__names_field_and_problem():
    error = InvalidInput("callerDID", "must be a non-empty string")

    assert error.field == "callerDID"
    assert error.problem == "must be a non-empty string"
    assert str(error) == "callerDID: must be a non-empty string"
    assert isinstance(error, StoreError)


def test_reserved_value__is_an_invalid_input():
    error = ReservedValue("marker", "'*contested*' is reserved")

    assert isinstance(error, InvalidInput)
    assert error.field == "marker"


# --- key / optional_key ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a", "did:key:z6Mk", "x" * check.MAX_KEY_LENGTH, " ", "é"])
def test_key__accepts_non_empty_strings(value):
    assert check.key("field", value) == value


@pytest.mark.parametrize("value", [*NOT_STRINGS, ""])
def test_key__refuses_empty_and_non_strings(value):
    assert refused(check.key, value).problem == "must be a non-empty string"


@pytest.mark.parametrize("value", ["did:\x00", "\x00", "a\ud800b"])
def test_key__refuses_nul_and_lone_surrogates(value):
    refused(check.key, value)


def test_json_text__refuses_lone_surrogates():
    refused(check.json_text, {"title": "\udc00"})


def test_key__refuses_over_max_length():
    error = refused(check.key, "x" * (check.MAX_KEY_LENGTH + 1))

    assert str(check.MAX_KEY_LENGTH) in error.problem


def test_optional_key__none_passes():
    assert check.optional_key("field", None) is None


@pytest.mark.parametrize("value", ["", 0, "x" * (check.MAX_KEY_LENGTH + 1)])
def test_optional_key__checks_given_values(value):
    refused(check.optional_key, value)


def test_optional_key__accepts_string():
    assert check.optional_key("field", "v") == "v"


# --- epoch_ms / optional_epoch_ms ------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 1_750_000_000_000, check.MAX_EPOCH_MS])
def test_epoch_ms__accepts_range(value):
    assert check.epoch_ms("field", value) == value


@pytest.mark.parametrize("value", [-1, check.MAX_EPOCH_MS + 1, 2**63])
def test_epoch_ms__refuses_out_of_range(value):
    refused(check.epoch_ms, value)


@pytest.mark.parametrize("value", [True, False, 1.0, 1.5, "1", None, float("nan")])
def test_epoch_ms__refuses_non_integers(value):
    refused(check.epoch_ms, value)


def test_optional_epoch_ms__none_passes():
    assert check.optional_epoch_ms("field", None) is None


@pytest.mark.parametrize("value", [-1, 1.0, True])
def test_optional_epoch_ms__checks_given_values(value):
    refused(check.optional_epoch_ms, value)


def test_optional_epoch_ms__accepts_integer():
    assert check.optional_epoch_ms("field", 5) == 5


# --- count ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, check.MAX_INT32])
def test_count__accepts_default_range(value):
    assert check.count("field", value) == value


@pytest.mark.parametrize("value", [-1, check.MAX_INT32 + 1])
def test_count__refuses_out_of_default_range(value):
    refused(check.count, value)


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None])
def test_count__refuses_non_integers(value):
    assert refused(check.count, value).problem == "must be an integer"


def test_count__custom_bounds_inclusive():
    assert check.count("limit", 1, minimum=1, maximum=500) == 1
    assert check.count("limit", 500, minimum=1, maximum=500) == 500
    assert refused(check.count, 0, field="limit", minimum=1, maximum=500).problem == (
        "must be between 1 and 500"
    )
    refused(check.count, 501, field="limit", minimum=1, maximum=500)


# --- choice / optional_choice ----------------------------------------------------------------

ALLOWED = frozenset({"offline", "auth"})


@pytest.mark.parametrize("value", ["offline", "auth"])
def test_choice__accepts_allowed(value):
    assert check.choice("reason", value, ALLOWED) == value


@pytest.mark.parametrize("value", ["OFFLINE", "", None, 1, "offline "])
def test_choice__refuses_others_listing_allowed_sorted(value):
    error = refused(check.choice, value, ALLOWED, field="reason")

    assert error.problem == "must be one of auth, offline"


def test_optional_choice__none_passes():
    assert check.optional_choice("reason", None, ALLOWED) is None


def test_optional_choice__checks_given_values():
    assert check.optional_choice("reason", "auth", ALLOWED) == "auth"
    refused(check.optional_choice, "sleepy", ALLOWED, field="reason")


# --- json_text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [None, True, 0, 1.5, "text", [], {}, {"a": [1, {"b": None}]}, {"é": "ü"}],
)
def test_json_text__round_trips(value):
    assert json.loads(check.json_text("field", value)) == value


def test_json_text__compact_ascii():
    assert check.json_text("field", {"a": [1, 2], "é": "ü"}) == '{"a":[1,2],"\\u00e9":"\\u00fc"}'
    assert check.json_text("field", None) == "null"


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), {"a": float("-inf")}, {1, 2}, object(), b"bytes", {(1,): 2}],
)
def test_json_text__refuses_non_json(value):
    assert refused(check.json_text, value).problem.startswith("must be JSON")


def test_json_text__size_limit_counts_ascii_json_as_responses_carry_it():
    fits = "x" * (check.MAX_JSON_BYTES - 2)
    assert len(check.json_text("field", fits)) == check.MAX_JSON_BYTES

    refused(check.json_text, fits + "x")
    emoji = "\U0001f600" * ((check.MAX_JSON_BYTES - 2) // 12 + 1)
    assert len(emoji.encode()) < check.MAX_JSON_BYTES
    refused(check.json_text, emoji)


def test_json_text__nesting_bounded_without_recursion():
    deep: list = []
    for _ in range(check.MAX_JSON_DEPTH - 2):
        deep = [deep]
    assert json.loads(check.json_text("field", {"a": deep})) == {"a": deep}
    refused(check.json_text, [{"a": deep}])
    very_deep: list = []
    for _ in range(100_000):
        very_deep = [very_deep]
    assert "nested" in refused(check.json_text, very_deep).problem


def test_json_text__refuses_lone_surrogates_in_keys():
    refused(check.json_text, {"\ud800": 1})


# --- key_list --------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [[], (), ["a"], ("a", "b"), ["a", "a"]])
def test_key_list__accepts_lists_and_tuples_keeping_order(values):
    assert check.key_list("documentIDs", values) == list(values)


@pytest.mark.parametrize("values", ["doc-1", {"doc-1"}, None, {"doc-1": 1}, iter(["a"])])
def test_key_list__refuses_non_sequences(values):
    refused(check.key_list, values, field="documentIDs")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        (["a", ""], "documentIDs[1]"),
        ([None], "documentIDs[0]"),
        (["a", "b", 2], "documentIDs[2]"),
        (["x" * 1025], "documentIDs[0]"),
    ],
)
def test_key_list__checks_every_item_naming_its_index(values, field):
    with pytest.raises(InvalidInput) as raised:
        check.key_list("documentIDs", values)
    assert raised.value.field == field
