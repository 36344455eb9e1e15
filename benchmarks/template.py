"""The exact statements one store lifecycle sends, recorded once and replayed by the floors.

``record`` runs one lifecycle (claim → markSendStarted → finalize) through the store and
keeps, per step, each statement's SQL (in the driver's paramstyle), its values and the
transaction it ran in. ``values_for`` substitutes another operation id and lease token (and
owner and account), so the floors run the same SQL, values and transactions as the store, on
the bare driver.
"""

import json
import secrets
from collections.abc import Sequence
from typing import Any

from benchmarks.load import claim_input
from store.database import Database

Statement = tuple[int | None, str, list[Any]]
"""(transaction number or None, SQL, values)"""

RECORDED_ID = "templateop0001"
RECORDED_TOKEN = "templatetoken001"
RECORDED_NEW_ID = "templatenewid"
"""The prefix of the ids the store draws while recording (``recording_ids``); each replay
puts its own random prefix in their place (node keys are unique)."""


def recording_ids() -> Any:
    """A ``new_id`` for the recording store: ``templatenewid0``, ``templatenewid1``, …"""
    counter = iter(range(1_000_000))
    return lambda: f"{RECORDED_NEW_ID}{next(counter)}"


async def record(db: Database, lifecycle: Any) -> list[list[Statement]]:
    """The statements of one lifecycle, per step (``lifecycle(id, token, step_done)``)."""
    steps: list[list[Statement]] = [[]]
    numbers: dict[object, int] = {}
    """Each transaction's number, in the order its first statement ran."""

    def recording(sql: str, values: Sequence[Any], transaction: object | None) -> None:
        number = None if transaction is None else numbers.setdefault(transaction, len(numbers))
        steps[-1].append((number, sql, list(values)))

    db.statement_observer = recording
    try:
        await lifecycle(RECORDED_ID, RECORDED_TOKEN, lambda: steps.append([]))
    finally:
        db.statement_observer = None
    return [step for step in steps if step]


def tenant_values(tenant: int) -> dict[str, str]:
    """The recorded lifecycle's owner and account (tenant 0's, ``load.claim_input``) to
    ``tenant``'s."""
    recorded, wanted = (claim_input("", "", 0, number) for number in (0, tenant))
    return {recorded[field]: wanted[field] for field in ("ownerDID", "accountKey")}


def values_for(values: list[Any], operation_id: str, token: str, tenant: int = 0) -> list[Any]:
    """The recorded ``values`` for another operation id and lease token (``token`` also
    stands in for the store's random ids), and for the owner and account of ``tenant`` (a
    value equal to tenant 0's owner or account is swapped whole)."""
    swaps = tenant_values(tenant) if tenant else {}
    return [
        swaps.get(
            value,
            value.replace(RECORDED_ID, operation_id)
            .replace(RECORDED_TOKEN, token)
            .replace(RECORDED_NEW_ID, token),
        )
        if isinstance(value, str)
        else value
        for value in values
    ]


BYTES_TAG = "$bytes"


def dumps(steps: list[list[Statement]]) -> str:
    """The recorded steps as JSON for the floor service's process: a ``bytes`` value (a
    tombstone's key digest) as ``{"$bytes": hex}``."""

    def tagged(value: Any) -> Any:
        if isinstance(value, bytes):
            return {BYTES_TAG: value.hex()}
        raise TypeError(f"cannot record a {type(value).__name__}")

    return json.dumps(steps, default=tagged)


def loads(text: str) -> list[list[Statement]]:
    """The steps ``dumps`` wrote, ``bytes`` values restored."""

    def untagged(value: dict[str, Any]) -> Any:
        return bytes.fromhex(value[BYTES_TAG]) if set(value) == {BYTES_TAG} else value

    steps: list[list[Statement]] = json.loads(text, object_hook=untagged)
    return steps


def groups(step: list[Statement]) -> list[tuple[int | None, list[Statement]]]:
    """The step's statements as runs: each transaction's together, others one by one."""
    runs: list[tuple[int | None, list[Statement]]] = []
    for statement in step:
        tx = statement[0]
        if tx is not None and runs and runs[-1][0] == tx:
            runs[-1][1].append(statement)
        else:
            runs.append((tx, [statement]))
    return runs


def new_token() -> str:
    return secrets.token_hex(8)
