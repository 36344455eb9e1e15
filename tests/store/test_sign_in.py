"""Sign-in codes and sessions (store.sign_in) on both backends: a code opens one session,
once, before it expires; a session is renewed while live and refused once signed out or
expired; ended rows are collected."""

import asyncio

import pytest
import sqlalchemy as sa

from store.errors import InvalidInput
from store.sign_in import EXPIRED, OWN_SUBJECT, UNKNOWN, USED, SignInRefused, code_hash
from store.tables import sign_in

CODE_MS = 600_000
SESSION_MS = 900_000


async def issued(store, sub="did:key:ops", scope="operator"):
    return await store.sign_in.issue_code(sub, scope, CODE_MS)


async def test_sign_in__opens_the_session_of_the_code(store, clock):
    code = await issued(store)
    session = await store.sign_in.sign_in(code.code, SESSION_MS)
    assert (session.session_id, session.sub, session.scope) == (
        code.session_id,
        "did:key:ops",
        "operator",
    )
    assert (session.signed_in_at, session.expires_at, session.revoked_at) == (
        clock.now,
        clock.now + SESSION_MS,
        None,
    )
    assert await store.sign_in.session(code.session_id) == session


async def test_issue_code__for_no_named_person_each_session_is_a_subject_of_its_own(store):
    codes = [await store.sign_in.issue_code(None, "service", CODE_MS) for _ in range(2)]
    sessions = [await store.sign_in.sign_in(code.code, SESSION_MS) for code in codes]
    assert [session.sub for session in sessions] == [
        OWN_SUBJECT + code.session_id for code in codes
    ]
    assert len({session.sub for session in sessions} | {"service"}) == 3


async def test_issue_code__only_its_hash_is_kept(store, database):
    code = await issued(store)
    rows = await database.fetch_all(sa.select(sign_in))
    assert [row["code_hash"] for row in rows] == [code_hash(code.code)]
    assert code.code not in str([dict(row) for row in rows])


async def test_sign_in__a_code_used_twice_is_refused(store):
    code = await issued(store)
    await store.sign_in.sign_in(code.code, SESSION_MS)
    with pytest.raises(SignInRefused) as refused:
        await store.sign_in.sign_in(code.code, SESSION_MS)
    assert refused.value.reason == USED


async def test_sign_in__an_expired_code_is_refused(store, clock):
    code = await issued(store)
    clock.advance(CODE_MS)
    with pytest.raises(SignInRefused) as refused:
        await store.sign_in.sign_in(code.code, SESSION_MS)
    assert refused.value.reason == EXPIRED
    assert await store.sign_in.session(code.session_id) is None


async def test_sign_in__an_unknown_code_is_refused(store):
    await issued(store)
    for code in ["not-a-code", "", "x" * 10_000, "\ud800", "code with spaces", "c\u00f6de"]:
        with pytest.raises(SignInRefused) as refused:
            await store.sign_in.sign_in(code, SESSION_MS)
        assert refused.value.reason == UNKNOWN


async def test_sign_in__racing_sign_ins_of_one_code_open_one_session(store):
    code = await issued(store)
    results = await asyncio.gather(
        *(store.sign_in.sign_in(code.code, SESSION_MS) for _ in range(8)), return_exceptions=True
    )
    opened = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, SignInRefused)]
    assert len(opened) == 1 and len(refused) == 7
    assert {r.reason for r in refused} == {USED}


async def test_issue_code__bad_input_refused(store):
    for sub, scope, ttl in [(" ", "service", 1), ("did:key:a", " ", 1), ("did:key:a", "x", 0)]:
        with pytest.raises(InvalidInput):
            await store.sign_in.issue_code(sub, scope, ttl)


async def test_renew__moves_a_live_session_on(store, clock):
    code = await issued(store)
    await store.sign_in.sign_in(code.code, SESSION_MS)
    clock.advance(SESSION_MS - 1)
    renewed = await store.sign_in.renew(code.session_id, SESSION_MS)
    assert renewed is not None and renewed.expires_at == clock.now + SESSION_MS
    assert (await store.sign_in.session(code.session_id)).expires_at == clock.now + SESSION_MS


async def test_renew__an_expired_session_is_refused(store, clock):
    code = await issued(store)
    session = await store.sign_in.sign_in(code.code, SESSION_MS)
    clock.advance(SESSION_MS)
    assert not session.live_at(clock.now)
    assert await store.sign_in.renew(code.session_id, SESSION_MS) is None
    assert (await store.sign_in.session(code.session_id)).expires_at == session.expires_at


async def test_renew__a_signed_out_session_is_refused(store):
    code = await issued(store)
    session = await store.sign_in.sign_in(code.code, SESSION_MS)
    assert await store.sign_in.sign_out(code.session_id)
    assert await store.sign_in.renew(code.session_id, SESSION_MS) is None
    assert (await store.sign_in.session(code.session_id)).expires_at == session.expires_at


async def test_renew__a_session_never_opened_is_refused(store):
    code = await issued(store)
    assert await store.sign_in.renew(code.session_id, SESSION_MS) is None
    assert await store.sign_in.session(code.session_id) is None


async def test_sign_out__revokes_once(store, clock):
    code = await issued(store)
    await store.sign_in.sign_in(code.code, SESSION_MS)
    clock.advance(5)
    assert await store.sign_in.sign_out(code.session_id)
    clock.advance(5)
    assert not await store.sign_in.sign_out(code.session_id)
    session = await store.sign_in.session(code.session_id)
    assert session.revoked_at == clock.now - 5 and not session.live_at(clock.now)


async def test_sign_out__a_code_not_used_is_not_a_session(store):
    code = await issued(store)
    assert not await store.sign_in.sign_out(code.session_id)
    await store.sign_in.sign_in(code.code, SESSION_MS)


async def test_delete_ended__codes_expired_unused_and_sessions_past_expiry(store, clock):
    unused = await issued(store)
    spent = await issued(store)
    await store.sign_in.sign_in(spent.code, SESSION_MS)
    signed_out = await issued(store)
    await store.sign_in.sign_in(signed_out.code, SESSION_MS)
    await store.sign_in.sign_out(signed_out.session_id)
    assert await store.sign_in.delete_ended(clock.now + CODE_MS - 1) == 0
    assert await store.sign_in.delete_ended(clock.now + CODE_MS) == 1
    with pytest.raises(SignInRefused):
        await store.sign_in.sign_in(unused.code, SESSION_MS)
    assert await store.sign_in.session(spent.session_id) is not None
    assert await store.sign_in.delete_ended(clock.now + SESSION_MS) == 2
    assert await store.sign_in.session(spent.session_id) is None
    assert await store.sign_in.session(signed_out.session_id) is None
