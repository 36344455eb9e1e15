"""The GraphQL pipeline: every schema extension of the API, in the one order they run, run
by Strawberry as one extension (``Pipeline``).

The steps run as a list of Strawberry extensions would. Each hook (``on_operation``,
``on_parse``, ``on_validate``, ``on_execute``) is a generator: the part before its ``yield``
runs in list order before the step, the part after it in reverse order after the step (they
nest like ``with`` blocks); so an extension that reads what another one leaves *after* a step
stands before it, and one whose work another reads *before* a step stands before that one
too. Resolver middleware (``resolve``) is composed with the *last* listed outermost, as
graphql-core composes a list. Strawberry parses only when no extension has set the document,
and validates only when no extension has set the errors.

Why one extension: for each extension and each of the four phases of every request, Strawberry
inspects the hook and wraps it in a new context manager (``functools.wraps`` and an
``ExitStack`` included), and graphql-core builds a new middleware chain for each field
resolver of the request, a link per extension with a ``resolve``: for nine extensions, about
a tenth of the server's CPU in a profile of the worker lifecycle, and ``{ serverTime }``
costs 0.27-0.29 ms of server CPU as one extension against 0.31-0.33 ms as nine
(``benchmarks/load.py``). ``Pipeline`` runs the steps' generator hooks itself, and, once the
operation has started, only the ``resolve`` hooks a step says it needs for this request
(``resolves``: ``FederatedTracing`` only when it traces). Strawberry's runner of the one
extension is ``PipelineRunner``, which enters the pipeline's hook of each phase as it is,
without Strawberry's wrapping per phase and request.

1. ``OperationTelemetry``: after the operation it tells the request's log line and metrics
   the outcome, the first error's code. First, so its after-part runs last: the errors
   have their codes by then (``ErrorCodes``).
2. ``FederatedTracing``: an ftv1 trace for a gateway's service token. Its ``on_operation``
   wraps every step after it, so the trace spans parsing, validation and execution.
3. ``ErrorCodes``: gives every error its code and masks the unexpected ones. It notes the
   phase of the errors that exist after parsing and after validation, so it stands before
   every extension that adds such errors (``QueryLimits``, ``CodedValidation``'s rules,
   ``DocumentCache``) and their after-parts have run when it looks. Before validation it
   refuses a document with several operations and no ``operationName`` (validation is
   then skipped, as the errors are set); it names the field of a variable graphql-core
   refused (a subscription's before execution: its stream's refusal is the check's
   errors). Its after-part of the operation codes the result before telemetry reads it.
4. ``Authorization``: each root field's rule, as resolver middleware. Listed after
   ``FederatedTracing``, so it is the outer one: a refused field is refused before any
   tracing wraps it, and only fields the viewer may see are timed.
5. ``MaxTokensLimiter``: Strawberry's, sets the parser's token limit when the operation
   starts, before ``DocumentCache`` parses with it.
6. ``QueryLimits``: refuses a document over the depth, field and alias limits before any
   validation rule walks it. Before ``DocumentCache``, whose validation is skipped once the
   errors are set.
7. ``AddValidationRules([NoSchemaIntrospectionCustomRule])``, only when introspection is
   off: adds its rule when the operation starts, before ``CodedValidation`` codes the rules.
8. ``CodedValidation``: adds the API's rule (a mutation takes work in its last root field
   only: ``resolvers.taking``) and swaps each validation rule for its coded twin before
   validation, before ``DocumentCache`` validates (and caches) with them.
9. ``DocumentCache``: so that it parses with the options and validates with the rules
   and errors everything above has set, and does each step from its caches.
10. ``VariableBounds``: last, after the document cache validated: refuses variables past a
   size any input takes before validation ends, as ``QueryLimits`` refuses a document (a
   document found invalid is answered with that).
"""

import inspect
from collections.abc import Callable, Generator, Iterator, Sequence
from functools import cache, partial
from types import TracebackType
from typing import Any

from graphql import NoSchemaIntrospectionCustomRule
from strawberry.extensions import AddValidationRules, MaxTokensLimiter, SchemaExtension
from strawberry.extensions.runner import SchemaExtensionsRunner

from resolvers.permissions import Authorization
from server.document_cache import DocumentCache
from server.errors.coded_validation import CodedValidation
from server.errors.error_codes import ErrorCodes
from server.errors.variable_bounds import VariableBounds
from server.federated_tracing import FederatedTracing
from server.query_limits import Limits, QueryLimits
from server.settings import Settings
from server.telemetry import OperationTelemetry


def pipeline(settings: Settings) -> list[Callable[[], SchemaExtension]]:
    """The schema's extensions, in the order of the module's docstring: each a class or a
    ``partial`` that makes a fresh one per request. ``settings`` give the token, depth,
    field and alias limits and say whether introspection is on."""
    limits = Limits(
        depth=settings.max_query_depth,
        fields=settings.max_query_fields,
        aliases=settings.max_aliases,
    )
    no_introspection: list[Callable[[], SchemaExtension]] = (
        []
        if settings.introspection
        else [partial(AddValidationRules, [NoSchemaIntrospectionCustomRule])]
    )
    return [
        OperationTelemetry,
        FederatedTracing,
        ErrorCodes,
        Authorization,
        partial(MaxTokensLimiter, max_token_count=settings.max_query_tokens),
        partial(QueryLimits, limits),
        *no_introspection,
        CodedValidation,
        DocumentCache,
        VariableBounds,
    ]


Step = Callable[[], SchemaExtension]

ROOT_RESOLVERS: tuple[type[SchemaExtension], ...] = (Authorization,)
"""The steps whose ``resolve`` hook acts on root fields only (``Authorization``'s rules): the
fast path, which runs no resolver middleware below the root, keeps them. A step with a
``resolve`` hook not listed here sends every request it resolves to graphql-core's path."""
PHASES = ("on_operation", "on_parse", "on_validate", "on_execute", "on_stream_result")


class Pipeline(SchemaExtension):
    """The extensions ``steps`` makes (one of each per request), run as one: each phase's
    hooks nested in list order, the ``resolve`` hooks composed with the last listed
    outermost. Every step's hooks must be plain generator functions (each of ours is); an
    error raised inside a phase is thrown into each step already entered, innermost first,
    as ``with`` blocks would, and then raised."""

    def __init__(self, steps: Sequence[Step], *, execution_context: Any = None) -> None:
        super().__init__(execution_context=execution_context)
        self.steps = [make() for make in steps]
        self.hooks = phase_hooks(tuple(type(step) for step in self.steps))
        self.resolving: tuple[Callable[..., Any], ...] = ()

    def on_operation(self) -> Generator[None, None, None]:
        for step in self.steps:
            step.execution_context = self.execution_context
        yield from self.nested("on_operation", started=self.resolve_hooks)

    def on_parse(self) -> Generator[None, None, None]:
        yield from self.nested("on_parse")

    def on_validate(self) -> Generator[None, None, None]:
        yield from self.nested("on_validate")

    def on_execute(self) -> Generator[None, None, None]:
        yield from self.nested("on_execute")

    def on_stream_result(self, result: Any) -> Iterator[None]:  # type: ignore[override]
        """Each result of a stream (a subscription's events), before it is sent: the steps'
        ``on_stream_result`` hooks, in order (``ErrorCodes`` codes its errors)."""
        for index, hook in self.hooks["on_stream_result"]:
            for _ in hook(self.steps[index], result):
                pass
        yield

    def nested(self, phase: str, started: Callable[[], None] | None = None) -> Iterator[None]:
        """The hooks of ``phase`` nested as ``with`` blocks: before-parts in order, then
        (after ``started``) the step, then the after-parts in reverse; an error is thrown
        into each step entered, innermost first, until one handles it."""
        entered: list[Generator[None, None, None]] = []
        error: BaseException | None = None
        try:
            for index, hook in self.hooks[phase]:
                generator = hook(self.steps[index])
                next(generator)
                entered.append(generator)
            if started is not None:
                started()
            yield
        except BaseException as raised:
            error = raised
        for generator in reversed(entered):
            try:
                if error is None:
                    next(generator)
                else:
                    generator.throw(error)
            except StopIteration:
                error = None
            except BaseException as raised:
                error = raised
            else:
                error = RuntimeError(f"a step's {phase} hook yielded twice")
        if error is not None:
            raise error

    def resolve_hooks(self) -> None:
        """The ``resolve`` hooks this request needs, the last listed outermost."""
        self.resolving = tuple(
            step.resolve
            for step in reversed(self.steps)
            if step._implements_resolve() and getattr(step, "resolves", True)
        )

    def resolve(
        self, _next: Callable[..., Any], root: Any, info: Any, *args: Any, **kwargs: Any
    ) -> Any:
        hooks = self.resolving
        if not hooks:
            return _next(root, info, *args, **kwargs)
        if len(hooks) == 1:
            return hooks[0](_next, root, info, *args, **kwargs)
        for hook in reversed(hooks[1:]):
            _next = partial(hook, _next)
        return hooks[0](_next, root, info, *args, **kwargs)

    def resolves_below_root(self) -> bool:
        """Whether a ``resolve`` hook this request runs reaches below the root fields: every
        step's but those of ``ROOT_RESOLVERS`` (the fast path runs only the root field's
        resolver middleware: ``server.fast_path``)."""
        return any(
            not isinstance(getattr(hook, "__self__", None), ROOT_RESOLVERS)
            for hook in self.resolving
        )

    def get_results(self) -> dict[str, Any]:
        results: dict[str, Any] = {}
        for step in self.steps:
            results.update(step.get_results())  # type: ignore[arg-type]
        return results


@cache
def phase_hooks(
    kinds: tuple[type[SchemaExtension], ...],
) -> dict[str, list[tuple[int, Callable[..., Generator[None, None, None]]]]]:
    """For each phase (``on_stream_result``, whose hooks take the result, included), the
    hooks of the step classes ``kinds`` that have one of their own,
    with each step's index, in order (worked out once per list of classes); raises
    ``TypeError`` for a hook that is not a generator function."""
    hooks: dict[str, list[tuple[int, Callable[..., Generator[None, None, None]]]]] = {}
    for phase in PHASES:
        default = getattr(SchemaExtension, phase)
        hooks[phase] = []
        for index, kind in enumerate(kinds):
            hook = getattr(kind, phase)
            if hook is default:
                continue
            if not inspect.isgeneratorfunction(hook):
                raise TypeError(f"{kind.__name__}.{phase} must be a generator function")
            hooks[phase].append((index, hook))
    return hooks


class Phase:
    """One phase of a ``Pipeline`` as a ``with`` (or ``async with``) block around the step
    Strawberry runs: the pipeline's generator hook of the phase entered and left as
    ``contextlib.contextmanager`` would (an error of the block thrown into it, and
    suppressed when the hook ends without raising it again), without the wrapper that
    Strawberry's runner builds for each hook of each phase of every request."""

    __slots__ = ("hook", "running")

    def __init__(self, hook: Callable[[], Generator[None, None, None]]) -> None:
        self.hook = hook

    def __enter__(self) -> None:
        self.running = self.hook()
        next(self.running)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if kind is None:
            try:
                next(self.running)
            except StopIteration:
                return False
            raise RuntimeError("a pipeline hook yielded twice")
        if error is None:
            error = kind()
        try:
            self.running.throw(error)
        except StopIteration:
            return True
        except BaseException as raised:
            if raised is error:
                return False
            raise
        raise RuntimeError("a pipeline hook yielded again after an error")

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return self.__exit__(kind, error, traceback)


class PipelineRunner(SchemaExtensionsRunner):
    """Strawberry's runner of a schema's extensions when they are one ``Pipeline``: each
    phase (operation, parsing, validation, execution) is the pipeline's own hook entered as
    a ``Phase``, where Strawberry's runner would inspect the hook and wrap it in a new
    context manager and ``ExitStack`` (about a fifth of ``{ serverTime }``'s CPU in a
    profile). Results of a stream and the extensions' results are Strawberry's."""

    def __init__(self, execution_context: Any, pipeline: Pipeline) -> None:
        super().__init__(execution_context, [pipeline])
        self.pipeline = pipeline

    def operation(self) -> Phase:  # type: ignore[override]
        return Phase(self.pipeline.on_operation)

    def parsing(self) -> Phase:  # type: ignore[override]
        return Phase(self.pipeline.on_parse)

    def validation(self) -> Phase:  # type: ignore[override]
        return Phase(self.pipeline.on_validate)

    def executing(self) -> Phase:  # type: ignore[override]
        return Phase(self.pipeline.on_execute)


def pipeline_extension(settings: Settings) -> Step:
    """The schema's one extension: ``Pipeline`` over ``pipeline(settings)``."""
    return partial(Pipeline, pipeline(settings))
