"""The server's bounds the client SDK keeps (``connector_store_client.bounds``, since it does
not import the server) equal the server's; outcomes made sendable within them; a ``Worker``
refusing arguments out of them at construction, naming the argument."""

import math

import pytest
from connector_store_client import Client, Committed, Deferred, Failed, RetryAfter, Worker, bounds
from connector_store_client.outcomes import sendable, sendable_delay, sendable_message

from server.settings import Settings
from store import accounts, events, items, leasing
from store import validation as check


def test_bounds__equal_the_servers():
    assert bounds.MAX_MESSAGE_BYTES == events.MAX_ERROR_BYTES
    assert bounds.MAX_DELAY_MS == check.MAX_INT32
    assert bounds.MAX_THROTTLE_MS == accounts.MAX_RETRY_AFTER_MS
    assert bounds.MAX_BATCH == leasing.MAX_BATCH == items.MAX_ITEMS
    assert (bounds.MIN_LEASE_MS, bounds.MAX_LEASE_MS) == (check.MIN_LEASE_MS, check.MAX_LEASE_MS)
    assert bounds.MAX_KEY_CHARS == check.MAX_KEY_LENGTH
    assert bounds.MAX_RESULT_BYTES == check.MAX_JSON_BYTES
    assert Settings.model_fields["max_body_bytes"].default == bounds.MAX_BODY_BYTES


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (None, None),
        ("x" * bounds.MAX_MESSAGE_BYTES, "x" * bounds.MAX_MESSAGE_BYTES),
        ("x" * (bounds.MAX_MESSAGE_BYTES + 1), "x" * (bounds.MAX_MESSAGE_BYTES - 3) + "…"),
        ("€" * 2_000, "€" * ((bounds.MAX_MESSAGE_BYTES - 3) // 3) + "…"),
        ("a\x00b\udc80c", "a\ufffdb\ufffdc"),
        (404, "404"),
    ],
)
def test_sendable_message__cut_to_the_bound_between_whole_characters(message, expected):
    sent = sendable_message(message)
    assert sent == expected
    assert sent is None or len(sent.encode()) <= bounds.MAX_MESSAGE_BYTES


@pytest.mark.parametrize(
    ("delay", "expected"),
    [
        (-5, 0),
        (0, 0),
        (1_500.7, 1_500),
        (3_000_000_000, bounds.MAX_DELAY_MS),
        (math.inf, bounds.MAX_DELAY_MS),
    ],
)
def test_sendable_delay__clamped_to_the_bounds(delay, expected):
    assert sendable_delay(delay) == expected


@pytest.mark.parametrize("delay", [None, "soon", True, math.nan])
def test_sendable_delay__refuses_what_is_not_a_number(delay):
    with pytest.raises((TypeError, ValueError)):
        sendable_delay(delay)


def test_sendable__each_outcome_within_the_bounds():
    long = "€" * 2_000
    cut = sendable_message(long)

    assert sendable(Committed({"id": 1})) == Committed({"id": 1})
    assert sendable(RetryAfter(-1, message=long)) == RetryAfter(0, message=cut)
    assert sendable(Deferred(2**40, "AUTH", long)) == Deferred(bounds.MAX_DELAY_MS, "AUTH", cut)
    assert sendable(Failed("permanent", 410, long)) == Failed("permanent", 410, cut)
    with pytest.raises(TypeError, match="None is not an outcome"):
        sendable(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("batch_size", bounds.MAX_BATCH + 1),
        ("batch_size", 0),
        ("batch_size", 10.0),
        ("lease_ms", bounds.MIN_LEASE_MS - 1),
        ("lease_ms", bounds.MAX_LEASE_MS + 1),
        ("concurrency", 0),
        ("verify_delay_ms", bounds.MAX_DELAY_MS + 1),
        ("verify_delay_ms", -1),
        ("fallback_s", 0),
        ("fallback_s", math.nan),
        ("shutdown_grace_s", -1),
        ("shutdown_grace_s", math.inf),
        ("account_keys", "acct-0"),
        ("account_keys", ["acct"] * (bounds.MAX_BATCH + 1)),
        ("marker", ""),
        ("marker", "m" * (bounds.MAX_KEY_CHARS - 32)),
        ("max_attempts", 0),
        ("max_attempts", 2.5),
        ("retry_base_ms", 0),
        ("retry_max_ms", 999),
        ("retry_max_ms", bounds.MAX_DELAY_MS + 1),
        ("handler_timeout_s", 0),
        ("handler_timeout_s", math.nan),
    ],
)
async def test_worker__arguments_out_of_bounds_raise_naming_the_argument(argument, value):
    async with Client("http://127.0.0.1:9/graphql") as client:
        with pytest.raises(ValueError, match=f"^{argument} must be"):
            Worker(client, handle, connector_name=None, **{argument: value})


async def test_worker__arguments_at_the_bounds_are_taken():
    async with Client("http://127.0.0.1:9/graphql") as client:
        Worker(
            client,
            handle,
            batch_size=bounds.MAX_BATCH,
            lease_ms=bounds.MIN_LEASE_MS,
            concurrency=1,
            verify_delay_ms=bounds.MAX_DELAY_MS,
            fallback_s=0.01,
            shutdown_grace_s=0,
            account_keys=[],
            marker="m" * (bounds.MAX_KEY_CHARS - 33),
            connector_name=None,
            max_attempts=1,
            retry_base_ms=1,
            retry_max_ms=bounds.MAX_DELAY_MS,
            handler_timeout_s=None,
        )


async def test_worker__the_connector_is_chosen_explicitly():
    async with Client("http://127.0.0.1:9/graphql") as client:
        with pytest.raises(TypeError, match="connector_name"):
            Worker(client, handle)  # type: ignore[call-arg]


async def handle(batch: list[object]) -> list[Committed]:
    return [Committed() for _ in batch]
