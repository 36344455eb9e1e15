"""Federated tracing (ftv1): a trace only when the request asks for it with a service token
(a gateway's); a tenant's request never gets one (it would carry raw error messages)."""

import base64

from tests.api.conftest import app_client
from tests.tokens import mint

FTV1 = {"apollo-federation-include-trace": "ftv1"}


async def test_ftv1__service_asks_and_gets_a_trace(http):
    traced = (await http.post("/graphql", json={"query": "{ serverTime }"}, headers=FTV1)).json()
    assert traced["extensions"]["ftv1"]
    plain = (await http.post("/graphql", json={"query": "{ serverTime }"})).json()
    assert "extensions" not in plain


async def test_ftv1__never_for_a_tenant(store):
    async with app_client(store, token=mint("did:t", "operations:read")) as tenant:
        body = (
            await tenant.post("/graphql", json={"query": "{ serverTime }"}, headers=FTV1)
        ).json()
    assert "serverTime" in body["data"]
    assert "extensions" not in body


async def test_ftv1__the_trace_times_each_resolved_field(http):
    query = "{ serverTime operations { edges { cursor } } }"
    traced = (await http.post("/graphql", json={"query": query}, headers=FTV1)).json()
    trace = base64.b64decode(traced["extensions"]["ftv1"])
    assert b"serverTime" in trace
    assert b"operations" in trace
