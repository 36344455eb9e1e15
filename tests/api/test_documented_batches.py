"""The batch round of docs/api.md (``## Driving a write-back``) runs as written: its
``<!-- batch: … -->`` JSON blocks are the variables of the named documents of
graphql/operations, and the last is (a part of) what ``FinalizeOperations`` answers."""

import json
import re
from pathlib import Path
from typing import Any

from tests.api.conftest import GraphQLClient, claim_input

API_DOC = Path(__file__).parents[2] / "docs" / "api.md"
WORKER = "did:key:worker"


def documented_blocks() -> dict[str, Any]:
    """Each ``<!-- batch: NAME -->`` block of docs/api.md, parsed, by name."""
    found = re.findall(r"<!-- batch: (\w+) -->\n```json\n(.*?)```", API_DOC.read_text(), re.S)
    return {name: json.loads(text) for name, text in found}


def within(part: Any, whole: Any) -> bool:
    """Whether ``part`` is ``whole`` with some object members left out."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(
            key in whole and within(value, whole[key]) for key, value in part.items()
        )
    if isinstance(part, list):
        return isinstance(whole, list) and len(part) == len(whole) and all(map(within, part, whole))
    return bool(part == whole)


async def due(gql: GraphQLClient, *operation_ids: str) -> None:
    """Claims of ``operation_ids`` by the documented worker, their leases let go: due."""
    items = [
        claim_input(callerDID=WORKER, operationID=ident, sourceID=f"evt-{ident}")
        for ident in operation_ids
    ]
    await gql.run("ClaimOperations", input={"items": items})
    keys = [{"callerDID": WORKER, "operationID": ident} for ident in operation_ids]
    await gql.run("ReleaseLeases", input={"leaseToken": "lease-A", "keys": keys})


async def test_documented_batch_round__runs_as_written(gql, clock):
    blocks = documented_blocks()
    assert list(blocks) == ["LeaseOperations", "MarkSendsStarted", "FinalizeOperations", "answer"]
    await due(gql, "op-1", "op-2")
    leased = await gql.run("LeaseOperations", **blocks["LeaseOperations"])
    assert [o["operationID"] for o in leased["leaseOperations"]["operations"]] == ["op-1", "op-2"]
    marked = await gql.run("MarkSendsStarted", **blocks["MarkSendsStarted"])
    results = marked["markSendsStarted"]["results"]
    assert [(r["applied"], r["operation"]["version"]) for r in results] == [(True, 0)] * 2
    finalized = await gql.run("FinalizeOperations", **blocks["FinalizeOperations"])
    assert within(blocks["answer"], finalized), finalized
