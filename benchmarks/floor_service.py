"""The minimal HTTP floor: Starlette + asyncpg, the lifecycle's three steps as three JSON
endpoints running the store's recorded statements (``benchmarks.template``), plus a plain
``/time`` endpoint (the floor of ``{ serverTime }``).

    BENCH_DSN=postgresql://… BENCH_TEMPLATE=steps.json uvicorn benchmarks.floor_service:app
"""

import contextlib
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from benchmarks.template import groups, loads, values_for

STEPS: list[Any] = []
POOL: dict[str, asyncpg.Pool] = {}


@asynccontextmanager
async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
    STEPS.extend(loads(Path(os.environ["BENCH_TEMPLATE"]).read_text()))
    POOL["pool"] = await asyncpg.create_pool(os.environ["BENCH_DSN"], min_size=16, max_size=16)
    yield
    await POOL["pool"].close()


async def step(request: Request) -> JSONResponse:
    body = await request.json()
    number = int(request.path_params["number"])
    # The most rows one statement of the step returned: its write's one row (a claim's
    # last statement is the tombstone probe, which finds none).
    rows = 0
    async with POOL["pool"].acquire() as connection:
        for tx, statements in groups(STEPS[number]):
            async with contextlib.AsyncExitStack() as stack:
                if tx is not None:
                    await stack.enter_async_context(connection.transaction())
                for _, sql, values in statements:
                    found = await connection.fetch(
                        sql, *values_for(values, body["id"], body["token"], body["tenant"])
                    )
                    rows = max(rows, len(found))
    return JSONResponse({"rows": rows})


async def server_time(request: Request) -> JSONResponse:
    return JSONResponse({"data": {"serverTime": int(time.time() * 1000)}})


app = Starlette(
    routes=[Route("/step/{number}", step, methods=["POST"]), Route("/time", server_time)],
    lifespan=lifespan,
)
