"""``make bench``: a lease of 50 right after a burst of 50,000 claims, before any ``ANALYZE``,
on PostgreSQL (issue 47's target: at most ``TARGET_MS``).

    .venv/bin/python -m benchmarks.burst_lease [--claims 50000] [--calls 5] [--rounds 2]

Each round on a fresh database whose operation table was analyzed while empty and is left
alone by autovacuum (``benchmarks.capped.fresh_store``): ``--claims`` enqueued claims
(``claimOperations``, 500 a batch, no lease) of one owner, spread over ``ACCOUNTS`` accounts
or all in one, then ``leaseOperations(limit: 50)`` as a service calls it, ``--calls`` times,
each call timed alone (the first one includes preparing its statement). A call that leases
fewer than 50 fails the run. Reported: the first call and the slowest of the rest (ms), per
spread, beside the target.
"""

import argparse
import asyncio
import os
import sys
import time

from benchmarks.capped import fresh_store
from store.records import OperationClaim

CLAIMS = 50_000
BATCH = 500
LIMIT = 50
LEASE_MS = 60_000
ACCOUNTS = 1_000
TARGET_MS = 100.0
TOKEN = "bench-burst"
SPREADS = {"one account": 1, f"{ACCOUNTS:,} accounts": ACCOUNTS}


def enqueued(n: int, accounts: int) -> OperationClaim:
    """The ``n``-th claim of the burst: no lease (enqueued), its own entity, one of
    ``accounts`` accounts."""
    return OperationClaim(
        caller_did="did:bench:caller",
        operation_id=f"burst-{n}",
        owner_did="did:bench:owner",
        connector_name="bench",
        model="CalendarEvent",
        op="create",
        account_key=f"acct-{n % accounts}",
        target="calendars/primary",
        source_id=f"source-{n}",
        deterministic_event_id=f"event-{n}",
        payload_hash="sha256:0",
        reissue_intent=None,
    )


async def burst_round(postgres_url: str, claims: int, calls: int, accounts: int) -> list[float]:
    """One round: ``claims`` claims over ``accounts`` accounts, then ``calls`` leases of
    ``LIMIT``; the ms of each."""
    async with fresh_store("postgresql", postgres_url) as store:
        for start in range(0, claims, BATCH):
            batch = [enqueued(n, accounts) for n in range(start, min(claims, start + BATCH))]
            await store.batches.claim_operations(batch)
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            leased = await store.leasing.lease_operations(TOKEN, LEASE_MS, limit=LIMIT)
            times.append((time.perf_counter() - started) * 1000)
            if len(leased) != LIMIT:
                raise SystemExit(f"a call leased {len(leased)} of {LIMIT}")
        return times


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=CLAIMS)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    url = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    print(f"lease of {LIMIT} right after {args.claims:,} claims, no ANALYZE (PostgreSQL)")
    print("| spread | first call ms | slowest later call ms | target ms | met |")
    print("| --- | ---: | ---: | ---: | --- |")
    for label, accounts in SPREADS.items():
        rounds = [
            await burst_round(url, args.claims, args.calls, accounts) for _ in range(args.rounds)
        ]
        first = max(times[0] for times in rounds)
        later = max(max(times[1:], default=0.0) for times in rounds)
        met = "yes" if max(first, later) <= TARGET_MS else "no"
        print(f"| {label} | {first:.1f} | {later:.1f} | {TARGET_MS:.0f} | {met} |")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
