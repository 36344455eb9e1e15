"""The parts of ``writeback_worker.py`` its verifier shares: the GraphQL client over httpx
(queries and multipart subscriptions), the fake provider, the changes written back and the
run's tally, and the timings of the example."""

import hashlib
import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

OPERATIONS_DIR = Path(__file__).resolve().parent.parent / "graphql" / "operations"
DOCUMENTS = [
    OPERATIONS_DIR / "worker.graphql",
    OPERATIONS_DIR / "verifier.graphql",
    OPERATIONS_DIR / "sync.graphql",
    OPERATIONS_DIR / "live.graphql",
]
MULTIPART = 'multipart/mixed;subscriptionSpec="1.0"'
"""The ``Accept`` header asking for a subscription over HTTP (Apollo's multipart protocol)."""
SYNC_CONNECTOR = "example-calendar"
"""The sync checkpoint's connector name: stable across runs, unlike the per-run one."""
SYNC_ATTEMPTS = 20

LEASE_MS = 30_000
"""How long a lease lasts. A worker that dies holding one blocks the operation this long."""
RETRY_AFTER_MS = 1_500
"""How long a transient failure waits before the operation is due again."""
VERIFY_AFTER_MS = 200
"""When the verifier should first check that the provider holds what we wrote (short, so
the example's verifier finds its watches due within a poll or two)."""
REVERIFY_AFTER_MS = 100
"""When a watch whose check found a mismatch (and whose entity was repaired) is due again."""
MAX_VERIFY_ATTEMPTS = 3
"""Mismatches a watch may see before it ends REPAIR_FAILED."""
CLAIM_MS = 10_000
"""How long a verifier's claim on a watch lasts."""
POLL_INTERVAL_S = 0.2
RETRY_DEADLINE_S = 30.0


class GraphQLError(Exception):
    """The server answered with ``errors`` (invalid input, missing rights, a bug)."""


class TransientProviderError(Exception):
    """The provider failed in a way worth retrying (a 503, a timeout)."""

    http_status = 503


class Client:
    """Posts the documents of ``worker.graphql``, ``verifier.graphql`` and ``sync.graphql``
    by name (each request sends the whole file holding the named operation); returns
    ``data`` or raises."""

    def __init__(self, url: str, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(timeout=10.0, headers=headers)
        self.url = url
        self.documents: dict[str, str] = {}
        for path in DOCUMENTS:
            text = path.read_text()
            for name in re.findall(r"^(?:query|mutation|subscription) (\w+)", text, re.MULTILINE):
                self.documents[name] = text

    def call(self, operation_name: str, **variables: Any) -> dict[str, Any]:
        response = self.http.post(
            self.url,
            json={
                "query": self.documents[operation_name],
                "operationName": operation_name,
                "variables": variables,
            },
        )
        body = response.json() if response.content else {}
        if body.get("errors") or response.status_code != 200:
            raise GraphQLError(
                f"{operation_name}: HTTP {response.status_code} {json.dumps(body)[:500]}"
            )
        return body["data"]

    def server_time(self) -> int:
        return self.call("ServerTime")["serverTime"]

    def subscribe(self, operation_name: str, **variables: Any) -> "Subscription":
        """A subscription over HTTP (Apollo's multipart protocol) on this client's
        connection settings."""
        return Subscription(self, operation_name, variables)

    def close(self) -> None:
        self.http.close()


class Subscription:
    """One subscription as a multipart HTTP response: ``next`` blocks until its next result
    (skipping the heartbeats the server sends every few seconds) and returns ``data``."""

    def __init__(self, client: Client, operation_name: str, variables: dict[str, Any]) -> None:
        self.stream = client.http.stream(
            "POST",
            client.url,
            json={
                "query": client.documents[operation_name],
                "operationName": operation_name,
                "variables": variables,
            },
            headers={"Accept": MULTIPART},
        )
        response = self.stream.__enter__()
        if response.status_code != 200:
            response.read()
            self.close()
            raise GraphQLError(f"{operation_name}: HTTP {response.status_code} {response.text}")
        self.name = operation_name
        self.parts = multipart_parts(response.iter_bytes())

    def next(self) -> dict[str, Any]:
        for part in self.parts:
            payload = part.get("payload")
            if payload is None:
                continue
            if payload.get("errors"):
                raise GraphQLError(f"{self.name}: {json.dumps(payload)[:500]}")
            return payload["data"]
        raise GraphQLError(f"{self.name}: the server ended the subscription")

    def close(self) -> None:
        self.stream.__exit__(None, None, None)


def multipart_parts(chunks: Any) -> Any:
    """The JSON bodies of a multipart response's parts, as they arrive (each part says its
    ``Content-Length``)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while (end := buffer.find(b"\r\n\r\n")) >= 0:
            found = re.search(rb"content-length: *(\d+)", buffer[:end], re.IGNORECASE)
            if found is None:
                buffer = buffer[end + 4 :]
                continue
            start = end + 4
            length = int(found.group(1))
            if len(buffer) < start + length:
                break
            yield json.loads(buffer[start : start + length])
            buffer = buffer[start + length :]


def state_digest(payload: dict[str, Any]) -> str:
    """The digest of a document state: what the store records as a document's winner, and
    what the verifier computes from the provider's entity to compare with it."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


class FakeProvider:
    """The external provider: entities in a dict, keyed by the write's idempotency key.

    ``flaky`` holds the idempotency keys whose first send fails transiently. ``garbled``
    holds the keys whose entity the provider keeps mangling on read (a field it rewrites),
    so no check or repair of it ever matches: that watch ends REPAIR_FAILED.
    """

    def __init__(self, flaky: set[str], garbled: set[str] | None = None) -> None:
        self.entities: dict[str, dict[str, Any]] = {}
        self.payloads: dict[str, dict[str, Any]] = {}
        self.flaky = set(flaky)
        self.garbled = set(garbled or ())

    def read_digest(self, idempotency_key: str) -> str | None:
        """The digest of what the provider holds for the key (None: nothing)."""
        payload = self.payloads.get(idempotency_key)
        if payload is None:
            return None
        if idempotency_key in self.garbled:
            payload = payload | {"title": payload["title"].upper() + " (provider copy)"}
        return state_digest(payload)

    def upsert(self, idempotency_key: str, payload: dict[str, Any]) -> dict[str, Any]:
        if idempotency_key in self.flaky:
            self.flaky.discard(idempotency_key)
            raise TransientProviderError("503 Service Unavailable")
        previous = self.entities.get(idempotency_key)
        entity = {
            "id": previous["id"] if previous else f"evt_{secrets.token_hex(6)}",
            "etag": secrets.token_hex(8),
            **payload,
        }
        self.entities[idempotency_key] = entity
        self.payloads[idempotency_key] = dict(payload)
        return entity


@dataclass(frozen=True)
class Change:
    """A document change to write back: one calendar event to create in the provider.

    ``edits`` counts later edits of the document (ingress) after the write-back.
    """

    run_id: str
    index: int
    edits: int = 0

    @property
    def operation_id(self) -> str:
        return f"{self.run_id}-op-{self.index}"

    @property
    def document_id(self) -> str:
        return f"doc-{self.run_id}-{self.index}"

    @property
    def event_id(self) -> str:
        """Derived from the document's change, not from the attempt: stable across retries."""
        return f"{self.document_id}@v1"

    @property
    def payload(self) -> dict[str, Any]:
        title = f"Meeting {self.index}" + (f" (edit {self.edits})" if self.edits else "")
        return {"title": title, "start": "2030-01-01T09:00:00Z"}

    @property
    def payload_hash(self) -> str:
        return state_digest(self.payload)


@dataclass
class Tally:
    committed: int = 0
    retries: int = 0
    wake_ups: int = 0
    """Times the worker waited on ``WorkAvailable`` for work (instead of polling)."""
    exists: int = 0
    conflicts: int = 0
    checks: int = 0
    ingress_opened: int = 0
    verified: int = 0
    repair_failed: int = 0
    failures: list[str] = field(default_factory=list)

    def expect(self, condition: bool, what: str) -> bool:
        if not condition:
            self.failures.append(what)
        return condition
