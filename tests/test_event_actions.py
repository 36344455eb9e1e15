"""The event logs' action names, spelled in the store (``store.events``), are the values of
the GraphQL enums that show them (``OperationAction``, ``WatchAction``): one list each, in
the same order, so an action the store writes is never one the API cannot show."""

import pytest

from schema.enums import OperationAction, WatchAction
from store.events import OPERATION_ACTIONS, WATCH_ACTIONS


@pytest.mark.parametrize(
    ("enum", "actions"),
    [(OperationAction, OPERATION_ACTIONS), (WatchAction, WATCH_ACTIONS)],
)
def test_event_actions__the_enum_holds_the_stores_actions_in_order(enum, actions):
    assert [member.value for member in enum] == list(actions)
    assert [member.name for member in enum] == [action.upper() for action in actions]
