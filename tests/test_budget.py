"""The request budget: rows as before, bytes spent by what lists return."""

import pytest
from graphql import GraphQLError
from pydantic import ValidationError

from resolvers.budget import MAX_ROWS_PER_REQUEST, Budget
from resolvers.codes import RESPONSE_TOO_LARGE
from server.settings import Settings


def test_allowance__what_is_left_then_refused_once_spent():
    budget = Budget(max_bytes=1000)
    budget.spend("operations", [600, 400])

    with pytest.raises(GraphQLError) as refused:
        budget.allowance("watches")

    assert refused.value.extensions == {
        "code": RESPONSE_TOO_LARGE,
        "field": "watches",
        "maxResponseBytes": 1000,
    }


def test_spend__the_first_list_may_pass_by_its_first_row_a_later_one_may_not():
    budget = Budget(max_bytes=1000)
    budget.spend("operations", [1500])
    later = Budget(max_bytes=1000)
    later.spend("operations", [600])

    with pytest.raises(GraphQLError, match="dueOperations"):
        later.spend("dueOperations", [500])

    assert budget.bytes_left == -500 and later.bytes_left == 400


def test_rows__refused_past_the_request_limit():
    budget = Budget()
    budget.take("first", MAX_ROWS_PER_REQUEST)

    with pytest.raises(GraphQLError, match="at most 1000 rows"):
        budget.take("limit", 1)


def test_max_response_bytes__below_64_kib_refused():
    with pytest.raises(ValidationError, match="max_response_bytes"):
        Settings(max_response_bytes=1000)
