"""What a handler answers for each leased operation, and ``ProviderRetryPolicy``, which turns
a provider's HTTP answer into one."""

import dataclasses
import email.utils
import json
import random
import re
import time
from dataclasses import dataclass
from typing import Any

from connector_store_client.bounds import MAX_DELAY_MS, MAX_MESSAGE_BYTES, MAX_RESULT_BYTES


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
    provider's 429; at most ``MAX_THROTTLE_MS``). The worker sends it as ``sendable`` makes
    it."""

    delay_ms: int
    kind: str = "transient"
    http_status: int | None = None
    message: str | None = None
    throttle_account: bool = False


@dataclass(frozen=True)
class Failed:
    """A permanent failure: the operation ends FAILED with ``kind``, ``http_status`` and
    ``message`` (cut as ``sendable`` cuts it)."""

    kind: str = "permanent"
    http_status: int | None = None
    message: str | None = None


@dataclass(frozen=True)
class Deferred:
    """Not sent: the operation waits ``delay_ms`` without counting an attempt, for
    ``reason`` (``OFFLINE`` or ``AUTH``, or None). The worker sends it as ``sendable`` makes
    it."""

    delay_ms: int
    reason: str | None = None
    message: str | None = None


Outcome = Committed | RetryAfter | Failed | Deferred

UNSENDABLE = re.compile("[\x00\ud800-\udfff]")
"""What no message may hold: NUL, lone surrogates (PostgreSQL text stores neither)."""
CUT_MARK = "…"
"""Ends a message ``sendable_message`` cut."""


def sendable_message(message: Any) -> str | None:
    """``message`` as a settle takes it: None stays None, anything else as ``str``, NUL and
    lone surrogates replaced by U+FFFD, cut to at most ``MAX_MESSAGE_BYTES`` bytes of UTF-8
    between whole characters and then ending with ``CUT_MARK``."""
    if message is None:
        return None
    try:
        text = str(message)
    except Exception as error:  # a message's own __str__ may raise anything
        text = f"<a {type(message).__name__} whose str() raised {type(error).__name__}>"
    encoded = UNSENDABLE.sub("\ufffd", text).encode()
    if len(encoded) <= MAX_MESSAGE_BYTES:
        return encoded.decode()
    room = MAX_MESSAGE_BYTES - len(CUT_MARK.encode())
    return encoded[:room].decode("utf-8", "ignore") + CUT_MARK


def sendable_delay(delay_ms: Any) -> int:
    """``delay_ms`` as a settle takes it: an int of ms from 0 to ``MAX_DELAY_MS`` (a longer
    delay is the longest, a negative one none). Raises ``TypeError`` for a value that is not
    a number, ``ValueError`` for NaN."""
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int | float):
        raise TypeError(f"delay_ms must be a number of ms, not {delay_ms!r}")
    return int(min(max(delay_ms, 0), MAX_DELAY_MS))


class UnsendableResult(Exception):
    """A ``Committed``'s ``result_entity`` the server would not take (``result_problem``
    says why). The provider took the write all the same: ``bare`` is the outcome without its
    result, which the worker commits instead."""

    def __init__(self, problem: str, bare: Committed) -> None:
        super().__init__(problem)
        self.bare = bare


def result_problem(result_entity: Any) -> str | None:
    """Why the server would not take ``result_entity``: not JSON (an object JSON cannot hold,
    NaN or an infinity) or past ``MAX_RESULT_BYTES`` encoded; None when it would."""
    try:
        text = json.dumps(result_entity, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        return f"result_entity is not JSON ({error})"
    if len(text) > MAX_RESULT_BYTES:
        return f"result_entity encodes to {len(text)} bytes of JSON, past {MAX_RESULT_BYTES}"
    return None


def sendable(outcome: Outcome) -> Outcome:
    """``outcome`` as the server takes it: its ``message`` through ``sendable_message``, its
    ``delay_ms`` through ``sendable_delay``, a ``Committed``'s result checked by
    ``result_problem``. Raises ``TypeError`` for a value that is not an ``Outcome`` or a
    ``delay_ms`` that is not a number, ``ValueError`` for NaN, ``UnsendableResult``."""
    if isinstance(outcome, RetryAfter | Deferred):
        return dataclasses.replace(
            outcome,
            delay_ms=sendable_delay(outcome.delay_ms),
            message=sendable_message(outcome.message),
        )
    if isinstance(outcome, Failed):
        return dataclasses.replace(outcome, message=sendable_message(outcome.message))
    if isinstance(outcome, Committed):
        problem = result_problem(outcome.result_entity)
        if problem is not None:
            raise UnsendableResult(problem, dataclasses.replace(outcome, result_entity=None))
        return outcome
    raise TypeError(f"{outcome!r:.200} is not an outcome")


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
