"""GraphiQL runs a subscription, in a real browser under the page's own
Content-Security-Policy: ``operationEvents`` over graphql-transport-ws, signed in by a link,
each event shown as it commits."""

from typing import Any

import httpx

from tests.e2e.live import Server
from tests.tokens import SERVICE_TOKEN, bearer
from tests.ui.conftest import browsing, sign_in_link
from tests.ui.seed import Seeded

FOLLOW = (
    'subscription { operationEvents(filter: {callerDID: "did:key:graphiql"}) '
    "{ toState operation { operationID } } }"
)
CLAIM = """mutation($input: ClaimOperationsInput!) {
  claimOperations(input: $input) { results { __typename } } }"""


async def claim(server: Server, operation_id: str) -> None:
    item = {
        "callerDID": "did:key:graphiql",
        "operationID": operation_id,
        "ownerDID": "did:key:owner",
        "connectorName": "calendar",
        "model": "Event",
        "op": "update",
        "accountKey": "acct-graphiql",
        "target": f"events/{operation_id}",
        "sourceID": f"evt-{operation_id}",
        "deterministicEventID": f"det-{operation_id}",
        "payloadHash": f"sha256:{operation_id}",
    }
    async with httpx.AsyncClient(base_url=server.url, headers=bearer(SERVICE_TOKEN)) as http:
        body = {"query": CLAIM, "variables": {"input": {"items": [item]}}}
        response = await http.post("/graphql", json=body)
    assert response.status_code == 200 and "errors" not in response.json(), response.text


async def test_graphiql__runs_a_subscription_and_shows_each_event(
    browser: Any, server: Server, seeded: Seeded
):
    link = await sign_in_link(server, page="/graphql")
    async with browsing(browser, bypass_csp=False) as page:
        await page.goto(link)
        await page.get_by_text("Signed in as service").wait_for()
        editor = page.locator(".graphiql-query-editor .CodeMirror").first
        await editor.evaluate("(element, query) => element.CodeMirror.setValue(query)", FOLLOW)
        await page.locator(".graphiql-execute-button").click()
        result = page.locator(".result-window")
        # Claim until the stream shows one (it follows from when it started), 30 at most.
        for sent in range(30):
            await claim(server, f"graphiql-op-{sent}")
            await page.wait_for_timeout(200)
            if await result.filter(has_text="graphiql-op").count():
                break
        shown = await result.inner_text()
        assert "graphiql-op" in shown and "errors" not in shown, shown
        await claim(server, "graphiql-op-last")
        await result.filter(has_text="graphiql-op-last").wait_for()
    assert page.requests.outside(server.url) == []
