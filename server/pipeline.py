"""The GraphQL pipeline: every schema extension of the API, in the one order they run.

How Strawberry runs a list of extensions decides where each must stand. Each hook
(``on_operation``, ``on_parse``, ``on_validate``, ``on_execute``) is a generator: the part
before its ``yield`` runs in list order before the step, the part after it in reverse order
after the step (they nest like ``with`` blocks); so an extension that reads what another one
leaves *after* a step stands before it, and one whose work another reads *before* a step
stands before that one too. Resolver middleware (``resolve``) is composed by graphql-core with
the *last* listed outermost. Strawberry parses only when no extension has set the document,
and validates only when no extension has set the errors.

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
   then skipped, as the errors are set); before execution it checks the variables. Its
   after-part of the operation codes the result before telemetry reads it.
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
8. ``CodedValidation``: swaps each validation rule for its coded twin before validation,
   before ``DocumentCache`` validates (and caches) with them.
9. ``DocumentCache``: last, so that it parses with the options and validates with the rules
   and errors everything above has set, and does each step from its caches.
"""

from collections.abc import Callable
from functools import partial

from graphql import NoSchemaIntrospectionCustomRule
from strawberry.extensions import AddValidationRules, MaxTokensLimiter, SchemaExtension

from resolvers.errors import CodedValidation, ErrorCodes
from resolvers.permissions import Authorization
from server.document_cache import DocumentCache
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
    ]
