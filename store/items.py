"""The items of a batch write: each checked as its single write checks it, refused as a whole.

A batch (``store.batches``) takes 1 to ``MAX_ITEMS`` items. A bad item refuses the whole
batch before anything is written, its error naming the item: ``items[3].leaseToken``.
"""

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from store.errors import InvalidInput

MAX_ITEMS = 500
"""The most items one batch takes (and the fewest is one)."""

_Item = TypeVar("_Item")
_Checked = TypeVar("_Checked")


def each_item(items: Sequence[_Item], check: Callable[[_Item], _Checked]) -> list[_Checked]:
    """``check`` of every item, in order. Raises ``InvalidInput`` naming ``items`` for fewer
    than one or more than ``MAX_ITEMS`` items, and the error ``check`` raised for an item
    (its type kept) with its field as ``items[i].<field>``."""
    if not 1 <= len(items) <= MAX_ITEMS:
        raise InvalidInput("items", f"must hold 1 to {MAX_ITEMS} items, not {len(items)}")
    checked = []
    for index, item in enumerate(items):
        try:
            checked.append(check(item))
        except InvalidInput as error:
            raise type(error)(f"items[{index}].{error.field}", error.problem) from error
    return checked


def refuse_repeats(keys: Sequence[Hashable], field: str) -> None:
    """Raise ``InvalidInput`` naming ``items[j].<field>`` for the first item whose key an
    earlier item ``i`` already named: two writes of one row in a batch would depend on
    their order."""
    first: dict[Hashable, int] = {}
    for index, key in enumerate(keys):
        earlier = first.setdefault(key, index)
        if earlier != index:
            raise InvalidInput(f"items[{index}].{field}", f"names the same key as items[{earlier}]")
