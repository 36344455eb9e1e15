"""Tokens for tests: every test process uses one known ``JWT_SECRET`` (set in the
environment by tests/conftest.py, so in-process apps and spawned servers agree)."""

import time
from typing import Any

import jwt

TEST_JWT_SECRET = "test-secret-for-the-suite-only-" + "0123456789abcdef" * 3
SERVICE = "service"


def mint(
    sub: str = SERVICE,
    scope: str = SERVICE,
    *,
    key: Any = TEST_JWT_SECRET,
    algorithm: str = "HS256",
    ttl: int = 24 * 3600,
    **claims: Any,
) -> str:
    """A signed token for ``sub`` with ``scope``, valid for ``ttl`` seconds (a day by
    default: modules mint theirs at import, and a slow full run reaches its last tests
    long after); ``claims`` add or replace claims (None drops one)."""
    now = int(time.time())
    payload: dict[str, Any] = {"sub": sub, "scope": scope, "iat": now, "exp": now + ttl}
    payload |= claims
    payload = {name: value for name, value in payload.items() if value is not None}
    return jwt.encode(payload, key, algorithm=algorithm)


def bearer(token: str) -> dict[str, str]:
    """The ``Authorization`` header carrying ``token``."""
    return {"Authorization": f"Bearer {token}"}


SERVICE_TOKEN = mint(ttl=24 * 3600)
