"""Stock Strawberry, the peer of our ``{ serverTime }``: a ``strawberry.Schema`` with one
``serverTime`` field (epoch ms), no extensions, served by ``strawberry.asgi.GraphQL`` as its
documentation shows, under the same uvicorn as our server (uvloop, httptools, no access log).

    uvicorn benchmarks.stock_strawberry:app --no-access-log
"""

import time
from typing import NewType

import strawberry
from strawberry.asgi import GraphQL
from strawberry.schema.config import StrawberryConfig
from strawberry.types.scalar import ScalarDefinition

EpochMillis = NewType("EpochMillis", int)
"""Milliseconds since the epoch (GraphQL ``Int`` is 32-bit)."""


@strawberry.type
class Query:
    @strawberry.field
    def server_time(self) -> EpochMillis:
        return EpochMillis(int(time.time() * 1000))


scalar_map: dict[object, ScalarDefinition] = {
    EpochMillis: strawberry.scalar(name="EpochMillis", serialize=int, parse_value=int)
}
app = GraphQL(strawberry.Schema(query=Query, config=StrawberryConfig(scalar_map=scalar_map)))
