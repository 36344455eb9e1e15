"""Provider accounts (store.accounts): caps, throttles and the list, on both backends."""

import pytest

from store.errors import InvalidInput
from tests.factories import claimed_operation


async def test_set_account_limit__creates_sets_and_clears(store, clock):
    await claimed_operation(store)
    set_ = await store.accounts.set_account_limit("calendar", "acct-1", 3)
    assert set_.in_flight == 1
    assert (set_.account.max_in_flight, set_.account.throttled_until) == (3, None)
    assert set_.account.updated_at == clock()

    cleared = await store.accounts.set_account_limit("calendar", "acct-1", None)
    assert cleared.account.max_in_flight is None


async def test_throttle_account__until_store_now_plus_retry_after(store, clock):
    await store.accounts.set_account_limit("calendar", "acct-1", 3)

    throttled = await store.accounts.throttle_account("calendar", "acct-1", 5_000)

    assert throttled.account.throttled_until == clock() + 5_000
    assert throttled.account.max_in_flight == 3


async def test_lift_throttle__ends_it_now_and_keeps_the_cap(store, clock):
    await store.accounts.set_account_limit("calendar", "acct-1", 3)
    await store.accounts.throttle_account("calendar", "acct-1", 5_000)

    lifted = await store.accounts.lift_throttle("calendar", "acct-1")

    assert (lifted.account.throttled_until, lifted.account.max_in_flight) == (None, 3)


async def test_list_accounts__keyset_pages_with_in_flight(store):
    await claimed_operation(store, account_key="b")
    await store.accounts.set_account_limit("calendar", "a", 1)
    await store.accounts.set_account_limit("calendar", "c", None)
    await store.accounts.set_account_limit("crm", "a", 1)

    first = await store.accounts.list_accounts("calendar", limit=2)
    rest = await store.accounts.list_accounts("calendar", after="b")

    assert [(a.account.account_key, a.in_flight) for a in first] == [("a", 0), ("b", 1)]
    assert [a.account.account_key for a in rest] == ["c"]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.accounts.set_account_limit("", "a", 1), "connectorName"),
        (lambda s: s.accounts.set_account_limit("c", "", 1), "accountKey"),
        (lambda s: s.accounts.set_account_limit("c", "a", -1), "maxInFlight"),
        (lambda s: s.accounts.throttle_account("c", "a", 0), "retryAfterMs"),
        (lambda s: s.accounts.throttle_account("c", "a", 86_400_001), "retryAfterMs"),
        (lambda s: s.accounts.list_accounts("c", limit=0), "limit"),
        (lambda s: s.accounts.list_accounts("c", after=""), "after"),
    ],
)
async def test_accounts__bad_input_names_the_field(store, call, field):
    with pytest.raises(InvalidInput) as raised:
        await call(store)

    assert raised.value.field == field
