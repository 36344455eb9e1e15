"""The error boundary: every GraphQL error leaves with an ``extensions.code``, given by
``server.errors.error_codes.ErrorCodes.coded`` in these steps, the first that applies:

1. A code given where the error was raised stays (``NOT_FOUND``, ``FORBIDDEN``, the limits'
   and the validation rules' codes, ``check_variables``' ``BAD_USER_INPUT``).
2. Raised while parsing: ``GRAPHQL_PARSE_FAILED``.
3. Raised while validating: ``GRAPHQL_VALIDATION_FAILED``; ``BAD_USER_INPUT`` naming the field
   for the rules that check argument and input values (``coded_rule``).
4. Raised while coercing variables: ``BAD_USER_INPUT`` naming the variable and the field
   (``check_variables``; on a stream, ``ErrorCodes.on_stream_result``); oversized values are
   refused before validation (``VariableBounds``).
5. Raised by Strawberry on the stream path (``STREAM_REFUSALS``): an unknown
   ``operationName``: ``OPERATION_RESOLUTION_FAILURE``; no query, or a query or mutation sent
   as a multipart subscription: ``BAD_REQUEST``.
6. Raised by a resolver: the store's ``InvalidInput``: ``BAD_USER_INPUT`` naming the field;
   ``EventsCollected``: ``EVENTS_COLLECTED`` naming ``after``; ``DatabaseUnavailable``:
   ``SERVICE_UNAVAILABLE``, retryable, logged with the request id; ``CasRetriesExhausted``:
   ``CONFLICT``, retryable; anything else: ``INTERNAL_SERVER_ERROR``, masked and logged with
   the request id.

Errors of steps 2-5 are ``RequestError``: the response has no ``data`` entry. Why:
docs/decisions/0017-error-codes-given-at-one-boundary.md.
"""
