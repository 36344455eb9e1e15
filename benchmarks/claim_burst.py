"""``make bench``: a one-account burst of claims beside the same claims spread over 1,000
accounts, per item, on PostgreSQL and SQLite.

    .venv/bin/python -m benchmarks.claim_burst [--items 1600] [--workers 16]
        [--backend postgresql|sqlite]

``--workers`` tasks share one store (a pool of 16 on PostgreSQL) and run worker lifecycles
until ``--items`` operations are committed: at batch 1 ``claimOperation`` (with its lease),
``markSendStarted``, ``finalizeOperation``; at batch 50 ``claimOperations``,
``markSendsStarted``, ``finalizeOperations`` of 50. Every operation is its own provider
entity, so every claim keeps its lease; one row claims them all in account ``acct-0``, the
other in ``acct-0`` … ``acct-999`` in turn. Reported per item: wall time (all workers at
once, so the throughput's inverse) and this process's CPU (``time.process_time``), and the
one-account row's wall time over the spread row's: a claim writes no account row that
exists (``store.claims``), so no claim of a busy account waits for another's commit, and the
ratio stays near 1.
"""

import argparse
import asyncio
import os
import time
from collections.abc import Sequence

from benchmarks.capped import fresh_store
from store import ConnectorStore
from store.operations import Finalize, OperationClaim, SendMark

BACKENDS = ("postgresql", "sqlite")
BATCHES = (1, 50)
ACCOUNTS = (1, 1_000)
LEASE_MS = 60_000


def _claim(worker: int, n: int, accounts: int) -> OperationClaim:
    key = f"w{worker}-{n}"
    return OperationClaim(
        caller_did="did:key:bench",
        operation_id=key,
        owner_did="did:key:owner",
        connector_name="bench",
        model="Event",
        op="update",
        account_key=f"acct-{n % accounts}",
        target=f"events/{key}",
        source_id=key,
        deterministic_event_id=key,
        payload_hash="sha256:bench",
        lease_token=f"run-{key}",
        lease_ms=LEASE_MS,
        reissue_intent={},
    )


async def _one_by_one(store: ConnectorStore, claims: Sequence[OperationClaim]) -> None:
    for claim in claims:
        claimed = await store.operations.claim_operation(claim)
        record = claimed.operation
        assert record is not None and record.lease_token == claim.lease_token, claimed
        token = record.lease_token
        marked = await store.operations.mark_send_started(
            record.caller_did, record.operation_id, token, f"m-{record.operation_id}"
        )
        assert marked is not None
        done = await store.operations.finalize_operation_and_arm_watch(
            Finalize(
                record.caller_did,
                record.operation_id,
                version=marked.version,
                lease_token=token,
                due_at=store.clock() + LEASE_MS,
            )
        )
        assert done is not None


async def _batched(store: ConnectorStore, claims: Sequence[OperationClaim]) -> None:
    claimed = await store.batches.claim_operations(claims)
    records = [result.operation for result in claimed]
    assert all(r is not None and r.lease_token for r in records), claimed
    leased = [r for r in records if r is not None]
    marked = await store.batches.mark_sends_started(
        [SendMark(r.caller_did, r.operation_id, r.lease_token or "", "m") for r in leased]
    )
    finals = [
        Finalize(r.caller_did, r.operation_id, m.version, r.lease_token or "", store.clock())
        for r, m in zip(leased, marked, strict=True)
        if m is not None
    ]
    assert len(finals) == len(leased)
    done = await store.batches.finalize_operations(finals)
    assert all(d is not None for d in done)


async def run_case(
    backend: str, postgres_url: str, batch: int, accounts: int, items: int, workers: int
) -> tuple[float, float]:
    """The wall time and CPU, in ms per item, of ``items`` lifecycles by ``workers``."""
    async with fresh_store(backend, postgres_url) as store:
        each = max(batch, items // workers // batch * batch)

        async def worker(w: int) -> None:
            for start in range(0, each, batch):
                claims = [_claim(w, n, accounts) for n in range(start, start + batch)]
                if batch == 1:
                    await _one_by_one(store, claims)
                else:
                    await _batched(store, claims)

        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker(w) for w in range(workers)))
        done = each * workers
        return (
            (time.perf_counter() - wall) * 1000 / done,
            (time.process_time() - cpu) * 1000 / done,
        )


async def main(args: argparse.Namespace) -> None:
    print("| backend | batch | accounts | ms per item (CPU) | one account ÷ 1,000 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for backend in args.backend or BACKENDS:
        for batch in BATCHES:
            walls: dict[int, float] = {}
            for accounts in ACCOUNTS:
                wall, cpu = await run_case(
                    backend, args.postgres_url, batch, accounts, args.items, args.workers
                )
                walls[accounts] = wall
                ratio = f"{walls[1] / wall:.2f}" if accounts != 1 else ""
                print(
                    f"| {backend} | {batch} | {accounts:,} | {wall:.3f} ({cpu:.3f}) | {ratio} |",
                    flush=True,
                )


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_600)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
