"""The GraphQL pipeline (``server/pipeline.py``): its extensions in their order, and the
operation name the client gave (the Strawberry internals it relies on are pinned in
tests/test_strawberry_internals.py)."""

from functools import partial

import pytest
from strawberry.extensions import AddValidationRules, MaxTokensLimiter, SchemaExtension

from resolvers.permissions import Authorization
from server.document_cache import DocumentCache
from server.errors.coded_validation import CodedValidation
from server.errors.error_codes import ErrorCodes
from server.errors.variable_bounds import VariableBounds
from server.federated_tracing import FederatedTracing
from server.graph import build_schema
from server.pipeline import Phase, Pipeline, PipelineRunner, pipeline
from server.query_limits import QueryLimits
from server.settings import Settings
from server.telemetry import OperationTelemetry


def kinds(extensions):
    return [
        extension.func if isinstance(extension, partial) else extension for extension in extensions
    ]


def test_pipeline__order_as_its_docstring_explains():
    assert kinds(pipeline(Settings())) == [
        OperationTelemetry,
        FederatedTracing,
        ErrorCodes,
        Authorization,
        MaxTokensLimiter,
        QueryLimits,
        CodedValidation,
        DocumentCache,
        VariableBounds,
    ]


def test_pipeline__no_introspection_rule_added_before_the_rules_are_coded():
    assert kinds(pipeline(Settings(introspection=False))) == [
        OperationTelemetry,
        FederatedTracing,
        ErrorCodes,
        Authorization,
        MaxTokensLimiter,
        QueryLimits,
        AddValidationRules,
        CodedValidation,
        DocumentCache,
        VariableBounds,
    ]


def test_schema__runs_the_pipeline_and_nothing_else():
    schema = build_schema(Settings())
    extensions = schema.get_extensions()
    assert [type(extension) for extension in extensions] == [Pipeline]
    assert [type(step) for step in extensions[0].steps] == kinds(pipeline(Settings()))


def recording(name, seen, *, resolves=True):
    """A step that notes when each part of its hooks runs, and its resolver link."""

    class Step(SchemaExtension):
        def on_operation(self):
            seen.append(f"{name}:operation")
            yield
            seen.append(f"{name}:operation done")

        def on_execute(self):
            seen.append(f"{name}:execute")
            yield
            seen.append(f"{name}:execute done")

        def resolve(self, _next, root, info, *args, **kwargs):
            seen.append(f"{name}:resolve")
            return _next(root, info, *args, **kwargs)

    Step.resolves = resolves
    return Step


def run_phases(extension, seen):
    """The phases as Strawberry runs them: the operation around execution and its fields."""
    extension.execution_context = None
    operation = extension.on_operation()
    next(operation)
    execute = extension.on_execute()
    next(execute)
    seen.append(extension.resolve(lambda root, info: "resolved", None, None))
    next(execute, None)
    next(operation, None)


def test_pipeline_extension__hooks_nest_in_list_order_and_the_last_resolver_is_outermost():
    seen = []
    run_phases(Pipeline([recording("a", seen), recording("b", seen)]), seen)
    assert seen == [
        "a:operation",
        "b:operation",
        "a:execute",
        "b:execute",
        "b:resolve",
        "a:resolve",
        "resolved",
        "b:execute done",
        "a:execute done",
        "b:operation done",
        "a:operation done",
    ]


def test_pipeline_extension__a_step_that_does_not_resolve_this_request_is_left_out():
    seen = []
    run_phases(Pipeline([recording("a", seen, resolves=False), recording("b", seen)]), seen)
    assert "a:resolve" not in seen
    assert "b:resolve" in seen


def test_pipeline_extension__an_error_is_thrown_into_each_entered_step_innermost_first():
    seen = []

    class Handles(SchemaExtension):
        def on_execute(self):
            try:
                yield
            except LookupError:
                seen.append("handled")

    class Sees(SchemaExtension):
        def on_execute(self):
            try:
                yield
            except LookupError:
                seen.append("seen")
                raise

    execute = Pipeline([Handles, Sees]).on_execute()
    next(execute)
    with pytest.raises(StopIteration):
        execute.throw(LookupError("boom"))
    assert seen == ["seen", "handled"]


def test_schema__runs_its_pipeline_through_the_pipeline_runner():
    schema = build_schema(Settings())
    extensions = schema.get_extensions()
    runner = schema.create_extensions_runner(None, extensions)
    assert isinstance(runner, PipelineRunner) and runner.extensions == extensions


def handling_step(seen):
    class Handles(SchemaExtension):
        def on_execute(self):
            seen.append("before")
            try:
                yield
            except LookupError:
                seen.append("handled")
                return
            seen.append("after")

    return Handles


async def test_phase__enters_and_leaves_the_pipeline_hook_as_a_with_block():
    seen = []
    pipeline = Pipeline([handling_step(seen)])
    async with Phase(pipeline.on_execute):
        seen.append("step")
    with Phase(pipeline.on_execute):
        seen.append("step")
    assert seen == ["before", "step", "after"] * 2


async def test_phase__an_error_a_hook_handles_is_suppressed_others_raised():
    seen = []
    pipeline = Pipeline([handling_step(seen)])
    async with Phase(pipeline.on_execute):
        raise LookupError("handled by the step")
    with pytest.raises(ValueError, match="not the step's"):
        async with Phase(pipeline.on_execute):
            raise ValueError("not the step's")
    assert seen == ["before", "handled", "before"]


def test_pipeline_extension__a_hook_that_is_not_a_generator_refused():
    class Plain(SchemaExtension):
        def on_parse(self):
            return None

    with pytest.raises(TypeError, match=r"Plain\.on_parse"):
        Pipeline([Plain])


async def test_operation_name__the_first_operation_named_explicitly_runs(gql):
    document = "query Now { serverTime }\nquery Other { serverTime }"
    response = await gql.http.post("/graphql", json={"query": document, "operationName": "Now"})
    body = response.json()
    assert "errors" not in body
    assert isinstance(body["data"]["serverTime"], int)
