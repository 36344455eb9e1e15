"""The fast path (``server.fast_path``) answers as graphql-core does, byte for byte: on the
worker's documents over HTTP, on every document of ``graphql/`` it plans, on generated
data (null where a field is non-null, values a leaf's type refuses), and on refusals. Every
API test runs both paths on each planned request (``conftest.both_paths``); these cases
make sure the paths are compared, and where."""

from pathlib import Path
from typing import Any

from graphql import FragmentDefinitionNode, OperationDefinitionNode, execute, parse
from graphql.execution import MiddlewareManager
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resolvers.budget import Budget
from resolvers.context import Context
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from schema.operation import Operation
from schema.results import OperationClaimed, OperationConflict, OperationWritePayload
from server.fast_path import REVIEWED_STEPS, plan_of
from server.graph import build_schema
from server.pipeline import pipeline
from server.settings import Settings
from server.strawberry_internals import graphql_schema
from tests.api.conftest import DOCUMENTS, GraphQLClient, claim_input, error_codes
from tests.factories import claimed_operation
from tests.fast_path_differential import COMPARED, MISMATCHES, Differential
from tests.tokens import bearer, mint

KEY = {"callerDID": "did:key:caller", "operationID": "op-1"}
SCHEMA = graphql_schema(build_schema())

WORKER_HOT_PATH = (
    "ClaimOperation",
    "ClaimOperations",
    "AcquireLease",
    "RenewLease",
    "ReleaseLease",
    "MarkSendStarted",
    "FinalizeOperation",
    "LeaseOperations",
    "MarkSendsStarted",
    "FinalizeOperations",
    "RecordOperations",
    "ServerTime",
)


def operations() -> dict[str, tuple[OperationDefinitionNode, dict[str, FragmentDefinitionNode]]]:
    """Every operation of ``graphql/operations``, by name, with its document's fragments."""
    found = {}
    for path in sorted(Path(DOCUMENTS).glob("*.graphql")):
        document = parse(path.read_text())
        fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        for definition in document.definitions:
            if isinstance(definition, OperationDefinitionNode) and definition.name:
                found[definition.name.value] = (definition, fragments)
    return found


def test_plans__the_worker_hot_path_is_planned():
    known = operations()
    assert [name for name in WORKER_HOT_PATH if plan_of(SCHEMA, *known[name]) is None] == []


def test_pipeline__every_step_was_reviewed_for_the_fast_path():
    """A step added to the pipeline fails this until ``server.fast_path.REVIEWED_STEPS``
    says the fast path keeps what it does (the plan replaces graphql-core's execution of the
    operation only; a step acting on each field's resolution must send requests to
    graphql-core's path: ``Pipeline.resolves_below_root``)."""
    steps = {
        getattr(step, "func", step).__name__
        for introspection in (True, False)
        for step in pipeline(Settings(introspection=introspection))
    }
    assert steps == set(REVIEWED_STEPS)


async def test_worker_documents__both_paths_agree_over_http(gql: GraphQLClient, clock):
    COMPARED.clear()
    claimed = await gql.run("ClaimOperation", input=claim_input(leaseExpiresAt=clock.now + 1_000))
    version = claimed["claimOperation"]["operation"]["version"]
    await gql.run("ServerTime")
    await gql.run("GetOperation", **KEY)
    await gql.run("RenewLease", input=KEY | {"token": "lease-A", "expiresAt": clock.now + 9_000})
    await gql.run("MarkSendStarted", input=KEY | {"leaseToken": "lease-A", "marker": "run-1"})
    await gql.run(
        "FinalizeOperation",
        input=KEY | {"version": version + 2, "leaseToken": "lease-A", "dueAt": clock.now},
    )
    await gql.run("DueOperations", now=clock.now + 60_000)
    assert COMPARED == [
        "ClaimOperation",
        "ServerTime",
        "GetOperation",
        "RenewLease",
        "MarkSendStarted",
        "FinalizeOperation",
        "DueOperations",
    ]
    assert MISMATCHES == []


async def test_refusals__a_tenant_refused_a_write_agrees_on_both_paths(gql: GraphQLClient, clock):
    await gql.run("ClaimOperation", input=claim_input(leaseExpiresAt=clock.now + 1_000))
    COMPARED.clear()
    reader = mint(scope="operations:read", ttl=3600)
    response = await gql.http.post(
        "/graphql",
        json={
            "query": next(t for t in gql.documents if "mutation MarkSendStarted" in t),
            "operationName": "MarkSendStarted",
            "variables": {"input": KEY | {"leaseToken": "lease-A", "marker": "m"}},
        },
        headers=bearer(reader),
    )
    assert error_codes(response.json()) == ["FORBIDDEN"]
    assert COMPARED == ["MarkSendStarted"] and MISMATCHES == []


def document_of(name: str) -> str:
    return next(
        path.read_text()
        for path in sorted(Path(DOCUMENTS).glob("*.graphql"))
        if f" {name}(" in path.read_text() or f" {name} " in path.read_text()
    )


class Answer:
    """Resolver middleware that answers the root field with ``value`` (or raises it)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def resolves_below_root(self) -> bool:
        return False

    def resolve(self, next_: Any, root: Any, info: Any, **args: Any) -> Any:
        if info.path.prev is not None:
            return next_(root, info, **args)
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=5),
    st.floats(allow_nan=True),
)
FIELDS = ("state", "attempts", "version", "last_error", "lease_expires_at", "created_at")


def answered(name: str, variables: dict[str, Any], value: Any, store: Any) -> None:
    """Run operation ``name`` with its root field answered by ``value``, on both paths."""
    context = Context(
        store=store,
        viewer=Viewer.service("did:key:caller"),
        loaders=Loaders(store, Budget()),
        request_id="r",
    )
    execute(
        SCHEMA,
        parse(document_of(name)),
        context_value=context,
        variable_values=variables,
        operation_name=name,
        middleware=MiddlewareManager(Answer(value)),
        executor_class=Differential,
    )


async def test_generated_data__both_paths_agree(store):
    """Generated payloads (fields null, or of a type their leaf refuses; the resolver
    raising) completed on both paths; run inside the test's event loop, as the app runs."""
    record = await claimed_operation(store)

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        changes=st.dictionaries(st.sampled_from(FIELDS), ODD_VALUES, max_size=3),
        applied=ODD_VALUES,
        present=st.booleans(),
        raised=st.booleans(),
        claim=st.sampled_from(["claimed", "conflict", "odd", "none"]),
    )
    def both_paths_agree(changes, applied, present, raised, claim):
        COMPARED.clear()
        MISMATCHES.clear()
        operation = Operation.from_record(record)
        for field, value in changes.items():
            setattr(operation, field, value)
        payload = OperationWritePayload(applied=applied, operation=operation if present else None)
        value: Any = ValueError("boom") if raised else payload
        input_ = KEY | {"leaseToken": "lease-A", "marker": "m"}
        answered("MarkSendStarted", {"input": input_}, value, store)
        answered("GetOperation", KEY, operation if present else None, store)
        answered("DueOperations", {"now": 1}, [operation, None] if present else [operation], store)
        claimed = {
            "claimed": OperationClaimed(operation=operation),
            "conflict": OperationConflict(caller_did="c", operation_id="o", message=applied),
            "odd": applied,
            "none": None,
        }[claim]
        answered("ClaimOperation", {"input": claim_input()}, claimed, store)
        assert COMPARED == ["MarkSendStarted", "GetOperation", "DueOperations", "ClaimOperation"]
        for mismatch in MISMATCHES:
            print(mismatch[0], mismatch[1].decode(), mismatch[2].decode(), sep="\n")
        assert MISMATCHES == []

    both_paths_agree()
