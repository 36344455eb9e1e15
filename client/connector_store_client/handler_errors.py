"""What the ``Worker`` records for an operation its handler gave no outcome for (it raised,
ran past ``handler_timeout_s``, or answered something that is not an outcome) or whose
outcome the server refused: a counted attempt, retried with exponential backoff and jitter,
and ``Failed`` once the operation has had ``max_attempts``."""

import random
from dataclasses import dataclass

from connector_store_client.outcomes import Failed, RetryAfter, sendable_message

DEFAULT_MAX_ATTEMPTS = 8
"""The attempts an operation gets when its handler keeps failing (``Worker(max_attempts=…)``):
the last one ends it ``FAILED``."""
DEFAULT_RETRY_BASE_MS = 1_000
DEFAULT_RETRY_MAX_MS = 300_000
"""The backoff after a handler error, in ms (``Worker(retry_base_ms=…, retry_max_ms=…)``)."""
HANDLER_ERROR = "handler_error"
"""The ``kind`` recorded for a handler that raised or answered no outcome."""
HANDLER_TIMEOUT = "handler_timeout"
"""The ``kind`` recorded for a handler cancelled past ``handler_timeout_s``."""


@dataclass(frozen=True)
class HandlerRetries:
    """How handler errors are retried: each counts an attempt; an operation whose attempt
    was its ``max_attempts``-th ends ``FAILED``; before that it is due again after
    ``delay_ms``."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    base_ms: int = DEFAULT_RETRY_BASE_MS
    max_ms: int = DEFAULT_RETRY_MAX_MS

    def delay_ms(self, attempts: int) -> int:
        """The delay after an operation's ``attempts``-th attempt (1, 2, …), in ms: the
        exponential ``base_ms · 2^(attempts-1)``, at most ``max_ms``, with equal jitter (a
        random delay from half of it to all of it), so operations that failed together come
        due apart."""
        ceiling = min(self.max_ms, self.base_ms * 2 ** min(max(attempts - 1, 0), 40))
        return random.randint(ceiling // 2, ceiling)

    def outcome(self, attempts: int, kind: str, problem: str) -> RetryAfter | Failed:
        """The outcome of an operation that had ``attempts`` attempts before this one when
        the handler failed it with ``problem`` (its message, as ``sendable_message`` cuts
        it): ``Failed`` when this attempt is the ``max_attempts``-th, else ``RetryAfter``."""
        message = sendable_message(problem)
        if attempts + 1 >= self.max_attempts:
            return Failed(kind, None, message)
        return RetryAfter(self.delay_ms(attempts + 1), kind, None, message)
