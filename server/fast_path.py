"""The execution path for known documents: an operation planned once from its parsed,
validated document and the schema, then run without graphql-core's per-field resolution.

The pipeline runs as it does for every request (``server.pipeline``): parsing, validation,
limits, variables and error codes are the steps' own, and graphql-core builds the executor
(coercing the variables). Only the execution of the operation differs (``FastExecutor``,
graphql-core's ``execute_operation``): the root field's resolver runs as graphql-core runs
it, through the request's resolver middleware (``Authorization``'s rule), and its result is
completed by the plan: a plain field reads its attribute, a leaf is coerced by its type,
a field with a resolver of its own (``id``, ``leaseToken``) calls it; null in a non-null
field, a leaf its type refuses and a resolver's error become the errors graphql-core would
raise, at the same paths, nulling the same parents.

What a plan covers (``plan_of``; anything else runs on graphql-core's path): a query or a
mutation of one root field, no directive anywhere, every selection on an object type
(or each possible type of an abstract one), no root field whose name begins with an
underscore (introspection's; Federation's ``_entities``, whose items may each be awaitable,
and ``_service``), fields whose resolvers take no argument and are not asynchronous,
and no step whose resolver middleware reaches below the root
(``FederatedTracing`` when it traces: ``resolves_below_root``). graphql-core stays the
reference: every planned request of the API tests runs on both paths and is compared byte
for byte (``tests/api/conftest.both_paths``), and ``tests/api/test_fast_path.py`` adds the
worker's documents, generated data and refusals.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    FieldNode,
    FragmentSpreadNode,
    GraphQLAbstractType,
    GraphQLError,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    located_error,
)
from graphql.execution import ExecutionResult, get_argument_values
from graphql.pyutils import Path, Undefined, inspect, is_iterable
from graphql.type import (
    is_abstract_type,
    is_leaf_type,
    is_list_type,
    is_non_null_type,
    is_object_type,
)
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

STRAWBERRY_DEFINITION = "strawberry-definition"
"""The key of a ``GraphQLField``'s extensions under which Strawberry keeps its field."""

MAX_PLANS = 512
"""The most operations whose plans are kept (the document cache's documents are reused)."""


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """One field of a selection: its response key, its definition, the attribute a plain
    field reads (None: its resolver runs), its nodes (for errors and resolvers' info) and,
    for an object type, the plan of its selection."""

    key: str
    name: str
    parent: GraphQLObjectType
    definition: GraphQLField | None
    attribute: str | None
    nodes: tuple[FieldNode, ...]
    selection: "SelectionPlan | AbstractPlan | None"


@dataclass(frozen=True, slots=True)
class SelectionPlan:
    """The fields one object type's selection asks for, in response order."""

    type_: GraphQLObjectType
    fields: tuple[FieldPlan, ...]


@dataclass(frozen=True, slots=True)
class AbstractPlan:
    """An abstract type's selection: the plan of each of its possible object types."""

    type_: GraphQLAbstractType
    by_type: Mapping[str, SelectionPlan]


@dataclass(frozen=True, slots=True)
class OperationPlan:
    """An operation of one root field: its root type, the field and its selection."""

    root_type: GraphQLObjectType
    field: FieldPlan


REVIEWED_STEPS = (
    "OperationTelemetry",
    "FederatedTracing",
    "ErrorCodes",
    "Authorization",
    "MaxTokensLimiter",
    "QueryLimits",
    "AddValidationRules",
    "CodedValidation",
    "DocumentCache",
    "VariableBounds",
)
"""The pipeline's steps (``server.pipeline``), each checked to act the same on the fast
path: every phase hook runs as it does on graphql-core's (the plan replaces only the
execution of the operation, after variables are coerced); ``Authorization``'s resolver
middleware runs on the root field, as on graphql-core's path; ``FederatedTracing``'s, which
times every field, sends its requests to graphql-core's path (``resolves_below_root``).
``tests/api/test_fast_path.py`` fails when the pipeline holds a step not listed here."""

PLANS: dict[int, tuple[OperationDefinitionNode, "OperationPlan | None"]] = {}
"""Each operation's plan (None: not covered), by the operation node's identity (the node kept
beside it, so an identity is never reused while its entry stands)."""


class NotPlanned(Exception):
    """The operation holds something the plan does not cover (``plan_of``)."""


def plan_of(
    schema: GraphQLSchema,
    operation: OperationDefinitionNode,
    fragments: Mapping[str, Any],
) -> OperationPlan | None:
    """The plan of ``operation`` (a validated document's, with its ``fragments`` by name),
    or None when it holds what the plan does not cover (the module's docstring)."""
    if operation.operation not in (OperationType.QUERY, OperationType.MUTATION):
        return None
    if operation.directives:
        return None
    root_type = schema.get_root_type(operation.operation)
    if root_type is None:
        return None
    try:
        roots = collect(schema, root_type, operation.selection_set, fragments)
        if len(roots) != 1:
            return None
        key, nodes = next(iter(roots.items()))
        name = nodes[0].name.value
        definition = root_type.fields.get(name)
        if definition is None or name.startswith("_"):
            return None
        return OperationPlan(
            root_type,
            FieldPlan(
                key,
                name,
                root_type,
                definition,
                None,
                tuple(nodes),
                selection_of(schema, definition.type, nodes, fragments),
            ),
        )
    except NotPlanned:
        return None


def collect(
    schema: GraphQLSchema,
    type_: GraphQLObjectType,
    selection_set: SelectionSetNode,
    fragments: Mapping[str, Any],
) -> dict[str, list[FieldNode]]:
    """The fields of ``selection_set`` on ``type_`` by response key, the fragments that
    apply to ``type_`` inlined (``applies``). Raises ``NotPlanned`` for a directive."""
    fields: dict[str, list[FieldNode]] = {}
    for selection in selection_set.selections:
        if selection.directives:
            raise NotPlanned
        if isinstance(selection, FieldNode):
            key = selection.alias.value if selection.alias else selection.name.value
            fields.setdefault(key, []).append(selection)
            continue
        if isinstance(selection, InlineFragmentNode):
            condition, inner = selection.type_condition, selection.selection_set
        elif isinstance(selection, FragmentSpreadNode):
            fragment = fragments.get(selection.name.value)
            if fragment is None:
                raise NotPlanned
            if fragment.directives or fragment.variable_definitions:
                raise NotPlanned
            condition, inner = fragment.type_condition, fragment.selection_set
        else:
            raise NotPlanned
        if condition is not None and not applies(schema, condition.name.value, type_):
            continue
        for key, nodes in collect(schema, type_, inner, fragments).items():
            fields.setdefault(key, []).extend(nodes)
    return fields


def applies(schema: GraphQLSchema, condition: str, type_: GraphQLObjectType) -> bool:
    """Whether a fragment on the type named ``condition`` applies to an object of ``type_``
    (graphql-core's ``does_fragment_condition_match``)."""
    conditional = schema.get_type(condition)
    if conditional is type_:
        return True
    return is_abstract_type(conditional) and schema.is_sub_type(conditional, type_)  # type: ignore[arg-type]


def selection_of(
    schema: GraphQLSchema,
    type_: GraphQLOutputType,
    nodes: list[FieldNode],
    fragments: Mapping[str, Any],
) -> SelectionPlan | AbstractPlan | None:
    """The plan of the selection of fields ``nodes`` of type ``type_`` (None for a leaf; one
    per possible type for an abstract type). Raises ``NotPlanned`` for a field the plan does
    not cover."""
    named = type_
    while isinstance(named, (GraphQLNonNull, GraphQLList)):
        named = named.of_type
    if is_leaf_type(named):
        return None
    if is_abstract_type(named):
        abstract: GraphQLAbstractType = named  # type: ignore[assignment]
        return AbstractPlan(
            abstract,
            {
                possible.name: object_selection(schema, possible, nodes, fragments)
                for possible in schema.get_possible_types(abstract)
            },
        )
    return object_selection(schema, named, nodes, fragments)  # type: ignore[arg-type]


def object_selection(
    schema: GraphQLSchema,
    object_type: GraphQLObjectType,
    nodes: list[FieldNode],
    fragments: Mapping[str, Any],
) -> SelectionPlan:
    """The plan of the selection of fields ``nodes`` on an object of ``object_type``."""
    merged: dict[str, list[FieldNode]] = {}
    for node in nodes:
        if node.selection_set is None:
            raise NotPlanned
        for key, inner in collect(schema, object_type, node.selection_set, fragments).items():
            merged.setdefault(key, []).extend(inner)
    return SelectionPlan(
        object_type,
        tuple(
            field_plan(schema, object_type, key, inner, fragments) for key, inner in merged.items()
        ),
    )


def field_plan(
    schema: GraphQLSchema,
    parent: GraphQLObjectType,
    key: str,
    nodes: list[FieldNode],
    fragments: Mapping[str, Any],
) -> FieldPlan:
    """The plan of field ``key`` of ``parent``. Raises ``NotPlanned`` for a field with
    arguments, an asynchronous resolver, or Strawberry field extensions or permissions."""
    name = nodes[0].name.value
    if name == "__typename":
        return FieldPlan(key, name, parent, None, None, tuple(nodes), None)
    definition = parent.fields.get(name)
    if definition is None or any(node.arguments for node in nodes) or definition.args:
        raise NotPlanned
    field = (definition.extensions or {}).get(STRAWBERRY_DEFINITION)
    if field is None or field.extensions or field.permission_classes:
        raise NotPlanned
    resolver = field.base_resolver
    if resolver is not None and resolver.is_async:
        raise NotPlanned
    attribute = field.python_name if resolver is None else None
    return FieldPlan(
        key,
        name,
        parent,
        definition,
        attribute,
        tuple(nodes),
        selection_of(schema, definition.type, nodes, fragments),
    )


class Propagated(Exception):
    """A located error on its way to the nearest nullable field (or list item) above."""

    def __init__(self, error: GraphQLError) -> None:
        super().__init__(error.message)
        self.error = error


class FastExecutor(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's graphql-core executor, whose ``execute_operation`` runs a planned
    operation by its plan (the module's docstring) and any other by graphql-core."""

    def execute_operation(self, serially: bool | None = None) -> Any:
        plan = self.plan()
        if plan is None or self.resolves_below_root():
            return super().execute_operation(serially)
        return self.run(plan)

    def plan(self) -> OperationPlan | None:
        """The plan of this executor's operation, made on its first request."""
        operation = self.operation
        known = PLANS.get(id(operation))
        if known is not None and known[0] is operation:
            return known[1]
        plan = plan_of(self.schema, operation, self.fragment_definitions)
        if len(PLANS) >= MAX_PLANS:
            PLANS.clear()
        PLANS[id(operation)] = (operation, plan)
        return plan

    def resolves_below_root(self) -> bool:
        """Whether a resolver middleware of this request reaches below the root fields
        (each middleware says so by ``resolves_below_root()``; one that does not say is
        taken to)."""
        manager = self.middleware_manager
        if manager is None:
            return False
        for middleware in manager.middlewares or ():
            below = getattr(middleware, "resolves_below_root", None)
            if below is None or below():
                return True
        return False

    def run(self, plan: OperationPlan) -> Any:
        """The operation's result by ``plan``: the root field as graphql-core resolves it,
        its value completed by the plan; awaitable when the resolver is."""
        field = plan.field
        definition = field.definition
        assert definition is not None
        path = Path(None, field.key, plan.root_type.name)
        try:
            resolve = definition.resolve or self.field_resolver
            if self.middleware_manager:
                resolve = self.middleware_manager.get_field_resolver(resolve)
            info = self.build_resolve_info(definition, list(field.nodes), plan.root_type, path)
            args = (
                get_argument_values(definition, field.nodes[0], self.variable_values)
                if definition.args or field.nodes[0].arguments
                else {}
            )
            result = resolve(self.root_value, info, **args)
        except Exception as raised:
            return self.completed(plan, raised=raised)
        if self.is_awaitable(result):

            async def awaited() -> ExecutionResult:
                try:
                    value = await result
                except Exception as raised:
                    return self.completed(plan, raised=raised)
                return self.completed(plan, value)

            return awaited()
        return self.completed(plan, result)

    def completed(
        self, plan: OperationPlan, value: Any = None, raised: Exception | None = None
    ) -> ExecutionResult:
        """The result of ``plan`` whose root field's resolver (with its middleware) returned
        ``value`` or raised ``raised``."""
        field = plan.field
        path = Path(None, field.key, plan.root_type.name)
        errors: list[GraphQLError] = []
        data = (
            self.root_value_of(field, path, value, errors)
            if raised is None
            else self.root_error(raised, field, path, errors)
        )
        return ExecutionResult(data, errors or None)

    def root_error(
        self, raised: Exception, field: FieldPlan, path: Path, errors: list[GraphQLError]
    ) -> dict[str, Any] | None:
        """The data when the root field's resolver raised: its error located at the field."""
        assert field.definition is not None
        errors.append(located_error(raised, list(field.nodes), path.as_list()))
        return None if is_non_null_type(field.definition.type) else {field.key: None}

    def root_value_of(
        self, field: FieldPlan, path: Path, value: Any, errors: list[GraphQLError]
    ) -> dict[str, Any] | None:
        """The data with the root field's ``value`` completed (None: a non-null root field
        ended null)."""
        assert field.definition is not None
        try:
            return {field.key: self.complete(field, field.definition.type, value, path, errors)}
        except Propagated as propagated:
            errors.append(propagated.error)
        except Exception as raised:
            errors.append(located_error(raised, list(field.nodes), path.as_list()))
        return None if is_non_null_type(field.definition.type) else {field.key: None}

    def complete(
        self,
        field: FieldPlan,
        type_: GraphQLOutputType,
        value: Any,
        path: Path,
        errors: list[GraphQLError],
    ) -> Any:
        """``value`` of ``field`` (of type ``type_``) completed as graphql-core completes it;
        raises ``Propagated`` when it must be null and ``type_`` is non-null."""
        if isinstance(value, Exception):
            raise Propagated(located_error(value, list(field.nodes), path.as_list()))
        if is_non_null_type(type_):
            completed = self.complete(field, type_.of_type, value, path, errors)  # type: ignore[union-attr]
            if completed is None:
                message = (
                    f"Cannot return null for non-nullable field {field.parent.name}.{field.name}."
                )
                raise Propagated(
                    located_error(TypeError(message), list(field.nodes), path.as_list())
                )
            return completed
        if value is None:
            return None
        if is_list_type(type_):
            item_type = type_.of_type  # type: ignore[union-attr]
            if not is_iterable(value):
                message = (
                    "Expected Iterable, but did not find one for field"
                    f" '{field.parent.name}.{field.name}'."
                )
                raise Propagated(
                    located_error(GraphQLError(message), list(field.nodes), path.as_list())
                )
            items = []
            for index, item in enumerate(value):
                item_path = path.add_key(index, None)
                try:
                    items.append(self.complete(field, item_type, item, item_path, errors))
                except Propagated as propagated:
                    if is_non_null_type(item_type):
                        raise
                    errors.append(propagated.error)
                    items.append(None)
                except Exception as raised:
                    error = located_error(raised, list(field.nodes), item_path.as_list())
                    if is_non_null_type(item_type):
                        raise Propagated(error) from None
                    errors.append(error)
                    items.append(None)
            return items
        if is_leaf_type(type_):
            try:
                coerced = type_.coerce_output_value(value)  # type: ignore[union-attr]
            except Exception as raised:
                raise Propagated(located_error(raised, list(field.nodes), path.as_list())) from None
            if coerced is None or coerced is Undefined:
                message = (
                    f"Expected `{inspect(type_)}.coerce_output_value("
                    f"{inspect(value)})` to return non-nullable value, returned:"
                    f" {inspect(coerced)}"
                )
                raise Propagated(
                    located_error(TypeError(message), list(field.nodes), path.as_list())
                )
            return coerced
        selection = field.selection
        if isinstance(selection, AbstractPlan):
            runtime = self.runtime_type(field, selection.type_, value, path)
            return self.complete_object(
                field, selection.by_type[runtime.name], runtime, value, path, errors
            )
        assert selection is not None
        return self.complete_object(field, selection, type_, value, path, errors)  # type: ignore[arg-type]

    def runtime_type(
        self, field: FieldPlan, abstract: GraphQLAbstractType, value: Any, path: Path
    ) -> GraphQLObjectType:
        """The object type ``value`` of the abstract type ``abstract`` is, by its type
        resolver, checked as graphql-core checks it (``ensure_valid_runtime_type``, with
        its messages); raises ``Propagated`` with the error it would raise."""
        definition = field.definition
        assert definition is not None
        info = self.build_resolve_info(definition, list(field.nodes), field.parent, path)
        resolve_type = abstract.resolve_type or self.type_resolver
        name = resolve_type(value, info, abstract)
        where = f"{field.parent.name}.{field.name}"
        runtime = self.schema.get_type(name) if isinstance(name, str) else None
        if self.is_awaitable(name):
            message = f"Abstract type '{abstract}' resolved asynchronously for field '{where}'."
        elif name is None:
            message = (
                f"Abstract type '{abstract}' must resolve to an Object type at runtime"
                f" for field '{where}'. Either the '{abstract}' type should provide"
                " a 'resolve_type' function or each possible type should provide"
                " an 'is_type_of' function."
            )
        elif not isinstance(name, str):
            message = (
                f"Abstract type '{abstract}' must resolve to an Object type at runtime"
                f" for field '{where}' with value {inspect(value)}, received"
                f" '{inspect(name)}', which is not a valid Object type name."
            )
        elif runtime is None:
            message = (
                f"Abstract type '{abstract}' was resolved to a type"
                f" '{name}' that does not exist inside the schema."
            )
        elif not is_object_type(runtime):
            message = f"Abstract type '{abstract}' was resolved to a non-object type '{name}'."
        elif not self.schema.is_sub_type(abstract, runtime):  # type: ignore[arg-type]
            message = f"Runtime Object type '{runtime}' is not a possible type for '{abstract}'."
        else:
            return runtime  # type: ignore[return-value]
        error = GraphQLError(message, list(field.nodes))
        raise Propagated(located_error(error, list(field.nodes), path.as_list()))

    def complete_object(
        self,
        field: FieldPlan,
        selection: SelectionPlan,
        type_: GraphQLObjectType,
        value: Any,
        path: Path,
        errors: list[GraphQLError],
    ) -> dict[str, Any]:
        """``value`` as an object of ``type_``, each field of ``selection``."""
        definition = field.definition
        assert definition is not None
        if type_.is_type_of is not None:
            info = self.build_resolve_info(definition, list(field.nodes), field.parent, path)
            if not type_.is_type_of(value, info):
                message = f"Expected value of type '{type_.name}' but got: {inspect(value)}."
                raise Propagated(
                    located_error(
                        GraphQLError(message, list(field.nodes)), list(field.nodes), path.as_list()
                    )
                )
        data: dict[str, Any] = {}
        for child in selection.fields:
            child_path = path.add_key(child.key, type_.name)
            child_definition = child.definition
            if child_definition is None:
                data[child.key] = type_.name
                continue
            try:
                if child.attribute is not None:
                    child_value = getattr(value, child.attribute)
                else:
                    info = self.build_resolve_info(
                        child_definition, list(child.nodes), type_, child_path
                    )
                    child_value = child_definition.resolve(value, info)  # type: ignore[misc]
                data[child.key] = self.complete(
                    child, child_definition.type, child_value, child_path, errors
                )
            except Propagated as propagated:
                if is_non_null_type(child_definition.type):
                    raise
                errors.append(propagated.error)
                data[child.key] = None
            except Exception as raised:
                error = located_error(raised, list(child.nodes), child_path.as_list())
                if is_non_null_type(child_definition.type):
                    raise Propagated(error) from None
                errors.append(error)
                data[child.key] = None
        return data
