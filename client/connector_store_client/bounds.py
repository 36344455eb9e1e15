"""The server's bounds on what the SDK sends. The SDK does not import the server, so they are
kept here; tests/test_client_bounds.py holds each equal to the server's."""

MAX_MESSAGE_BYTES = 2048
"""The longest ``errorMessage`` a settle takes, in bytes of UTF-8."""

MAX_DELAY_MS = 2**31 - 1
"""The longest ``delayMs`` a settle takes (a GraphQL ``Int``), in ms: about 24.8 days."""

MAX_THROTTLE_MS = 86_400_000
"""The longest ``retryAfterMs`` ``throttleAccount`` takes, in ms: one day."""

MAX_BATCH = 500
"""The most operations one ``leaseOperations`` leases (its ``limit``: 1 to this), and the
most items one batch settle takes."""

MIN_LEASE_MS = 1_000
MAX_LEASE_MS = 3_600_000
"""A lease's duration (``leaseMs``), in ms: from ``MIN_LEASE_MS`` to ``MAX_LEASE_MS``."""

MAX_KEY_CHARS = 1024
"""The longest key (a lease token, a send marker, a kind), in characters."""

MAX_RESULT_BYTES = 64 * 1024
"""The largest ``resultEntity`` a finalize takes, in bytes of JSON."""

MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest request body the server takes by default (its ``MAX_BODY_BYTES``); the
``Worker`` keeps each settle request within half of it."""
