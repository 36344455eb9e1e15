"""graphql/schema.graphql is the printed schema; graphql/operations are valid against it."""

import re
from pathlib import Path

import pytest
from graphql import parse, print_ast, validate

from server.graph import build_schema
from server.strawberry_internals import graphql_schema

GRAPHQL = Path(__file__).resolve().parents[1] / "graphql"


def test_schema_snapshot__matches_code():
    printed = build_schema().as_str()
    stored = (GRAPHQL / "schema.graphql").read_text()
    assert stored.strip() == printed.strip(), "stale schema: run `make schema` and commit it"


@pytest.mark.parametrize("document", sorted((GRAPHQL / "operations").glob("*.graphql")), ids=str)
def test_operation_documents__valid_against_schema(document):
    schema = graphql_schema(build_schema())
    assert validate(schema, parse(document.read_text())) == []


def without_descriptions(sdl: str) -> str:
    """``sdl`` printed again without its descriptions (arguments then print on one line)."""
    return print_ast(parse(re.sub(r'"""[\s\S]*?"""', "", sdl)))


def test_schema__contract_names():
    printed = without_descriptions(build_schema().as_str())
    for line in [
        "claimOperation(input: ClaimOperationInput!): ClaimOperationResult!",
        "union ClaimOperationResult = OperationClaimed | OperationExists | OperationConflict",
        "operation(callerDID: String!, operationID: String!): Operation",
        "hasNewerOperationOnDocument(callerDID: String!, operationID: String!): Boolean!",
        "dueOperations(now: EpochMillis!, limit: Int = null, connectorName: String = null)",
        "finalizeOperation(input: FinalizeOperationInput!): FinalizeOperationPayload!",
        "scalar EpochMillis",
        "serverTime: EpochMillis!",
        "watch(identity: WatchIdentityInput!): Watch",
        "watchByDocument(documentID: String!): Watch",
        "watches(filter: WatchFilter = null, first: Int = null, after: String = null): "
        "WatchConnection!",
        "dueWatches(now: EpochMillis!, limit: Int = null, connectorName: String = null): [Watch!]!",
        "armWatch(input: ArmWatchInput!): ArmWatchPayload!",
        "claimWatchAttempt(input: ClaimWatchAttemptInput!): WatchWritePayload!",
        "deferWatch(input: DeferWatchInput!): WatchWritePayload!",
        "recordVerification(input: RecordVerificationInput!): RecordVerificationPayload!",
        "recordIngress(input: RecordIngressInput!): RecordIngressPayload!",
        "resumeOfflineDeferred(input: ResumeOfflineDeferredInput!): ResumeDeferredPayload!",
        "resumeAuthDeferred(input: ResumeAuthDeferredInput!): ResumeDeferredPayload!",
        "results: [ArmWatchPayload!]!",
        "outcome: ArmOutcome!",
        "outcome: VerificationOutcome!",
        "resumedOperations: Int!",
        "operations: [Operation!]!",
    ]:
        assert line in printed, line
