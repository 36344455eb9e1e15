"""Root field decorators typed for ``mypy --strict``.

Strawberry types ``strawberry.field(description=…)`` and ``strawberry.mutation(…)`` as
returning ``Any`` (so the keyword form can also stand as a dataclass default), and strict mode
refuses a decorator typed ``Any``. These return Strawberry's own decorators, stating the type
they have on a resolver method: the method comes back as a ``StrawberryField`` whose
signature is the method's (``tests/test_schema_records.py`` pins that it does).
"""

from collections.abc import Callable
from typing import Any, TypeVar, cast

import strawberry

_Resolver = TypeVar("_Resolver", bound=Callable[..., Any])


def query(description: str) -> Callable[[_Resolver], _Resolver]:
    """``strawberry.field(description=description)`` for a resolver method."""
    return cast(Callable[[_Resolver], _Resolver], strawberry.field(description=description))


def shareable_query(description: str) -> Callable[[_Resolver], _Resolver]:
    """``query``, marked ``@shareable``: a root field another subgraph may define too."""
    return cast(
        Callable[[_Resolver], _Resolver],
        strawberry.federation.field(description=description, shareable=True),
    )


def mutation(description: str) -> Callable[[_Resolver], _Resolver]:
    """``strawberry.mutation(description=description)`` for a resolver method."""
    return cast(Callable[[_Resolver], _Resolver], strawberry.mutation(description=description))


def subscription(description: str) -> Callable[[_Resolver], _Resolver]:
    """``strawberry.subscription(description=description)`` for a resolver method."""
    return cast(Callable[[_Resolver], _Resolver], strawberry.subscription(description=description))
