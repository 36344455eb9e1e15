"""What a handler answers for each leased operation, and ``ProviderRetryPolicy``, which turns
a provider's HTTP answer into one."""

import email.utils
import random
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Committed:
    """The provider took the write: the operation is finalized (COMMITTED) with the
    provider's ``result_entity`` (any JSON) and ``provider_etag``, and its entity's verify
    watch armed."""

    result_entity: Any = None
    provider_etag: str | None = None


@dataclass(frozen=True)
class RetryAfter:
    """A transient failure: the attempt is counted and the operation is due again in
    ``delay_ms``. ``kind``, ``http_status`` and ``message`` are recorded on it.
    ``throttle_account``: also stop leasing the whole account for ``delay_ms`` (a
    provider's 429)."""

    delay_ms: int
    kind: str = "transient"
    http_status: int | None = None
    message: str | None = None
    throttle_account: bool = False


@dataclass(frozen=True)
class Failed:
    """A permanent failure: the operation ends FAILED with ``kind``, ``http_status`` and
    ``message``."""

    kind: str = "permanent"
    http_status: int | None = None
    message: str | None = None


@dataclass(frozen=True)
class Deferred:
    """Not sent: the operation waits ``delay_ms`` without counting an attempt, for
    ``reason`` (``OFFLINE`` or ``AUTH``, or None)."""

    delay_ms: int
    reason: str | None = None
    message: str | None = None


Outcome = Committed | RetryAfter | Failed | Deferred


def retry_after_ms(value: str | None, now_s: float | None = None) -> int | None:
    """A ``Retry-After`` header in ms: delay-seconds or an HTTP date (None when absent or
    unreadable; a date in the past is 0)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value) * 1000
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = time.time() if now_s is None else now_s
    return max(0, int((when.timestamp() - now) * 1000))


@dataclass(frozen=True)
class ProviderRetryPolicy:
    """How a provider's HTTP answers become outcomes: 429 retries after its ``Retry-After``
    (else the backoff) and throttles the account; 408 and 5xx retry with exponential backoff
    from ``base_ms`` to ``max_ms`` (full jitter); other 4xx fail; past ``max_attempts``
    attempts a retryable answer fails too (kind ``exhausted``)."""

    base_ms: int = 1_000
    max_ms: int = 300_000
    max_attempts: int = 8

    def backoff_ms(self, attempts: int) -> int:
        """The delay after ``attempts`` attempts (0, 1, …)."""
        return random.randint(
            self.base_ms, max(self.base_ms, min(self.max_ms, self.base_ms * 2**attempts))
        )

    def outcome(
        self,
        status: int,
        attempts: int,
        *,
        retry_after: str | None = None,
        message: str | None = None,
    ) -> Outcome | None:
        """The outcome for a provider's answer ``status`` to an operation with ``attempts``
        attempts so far (None for a 2xx or 3xx: the handler commits it with what the
        provider returned). ``retry_after``: the answer's ``Retry-After`` header."""
        if status < 400:
            return None
        retryable = status in (408, 429) or status >= 500
        if not retryable:
            return Failed("permanent", status, message)
        if attempts + 1 >= self.max_attempts:
            return Failed("exhausted", status, message)
        if status == 429:
            delay = retry_after_ms(retry_after)
            if delay is None:
                delay = self.backoff_ms(attempts)
            return RetryAfter(max(delay, 1), "rate_limited", status, message, True)
        return RetryAfter(self.backoff_ms(attempts), "transient", status, message)
