"""The error boundary: every GraphQL error leaves with an ``extensions.code``, decided in one
place from where the error was raised and the type of what raised it.

The steps, in order (``server.errors.error_codes.ErrorCodes.coded``):

1. A code given where the error was raised stays: our resolvers' ``NOT_FOUND`` and
   ``FORBIDDEN``, the limits' ``GRAPHQL_VALIDATION_FAILED``, and the codes the validation rules
   and the variable check below attach when they create their errors.
2. Raised while parsing → ``GRAPHQL_PARSE_FAILED``.
3. Raised while validating → ``GRAPHQL_VALIDATION_FAILED`` (a rule that checks argument and
   input values, ``ValuesOfCorrectTypeRule`` and ``ProvidedRequiredArgumentsRule``, tags its
   errors ``BAD_USER_INPUT`` naming the field, by the rule's class: see ``coded_rule``).
4. Raised while coercing variables → ``BAD_USER_INPUT`` naming the variable and the field
   (``check_variables``, run once graphql-core refused a query's or a mutation's
   variables, and before a subscription's execution, whose stream answers with them:
   ``ErrorCodes.on_stream_result``); values past a size any input takes are refused so
   before validation (``VariableBounds``).
5. Raised by Strawberry before validation on the stream path, by the type of the exception
   (``STREAM_REFUSALS``): an unknown ``operationName`` → ``OPERATION_RESOLUTION_FAILURE``; no
   query, or a query or mutation sent as a multipart subscription → ``BAD_REQUEST``.
6. Raised by a resolver, by the type of the exception: the store's ``InvalidInput`` →
   ``BAD_USER_INPUT`` naming the field; ``EventsCollected`` (a page of events after a cursor
   whose following events were collected) → ``EVENTS_COLLECTED`` naming ``after``;
   ``DatabaseUnavailable`` → ``SERVICE_UNAVAILABLE``
   (logged with the request id; retryable); ``CasRetriesExhausted`` → ``CONFLICT``
   (retryable); anything else is masked as ``INTERNAL_SERVER_ERROR`` and logged with the
   request id.

Errors of steps 2-5 are ``RequestError``: the request failed before execution, so the
response has no ``data`` entry (GraphQL over HTTP).
"""
