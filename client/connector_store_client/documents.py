"""The GraphQL documents the client sends, one operation each with the fragments it spreads,
read from ``operations.graphql`` beside this module (ariadne-codegen builds ``models/`` from
the same file; a test validates each document against the server's client SDL,
``graphql/client-schema.graphql``)."""

import re
from importlib.resources import files

DEFINITION = re.compile(r"^(query|mutation|subscription|fragment) ([A-Za-z_]\w*)", re.MULTILINE)
SPREAD = re.compile(r"\.\.\.([A-Za-z_]\w*)")


def split(source: str) -> dict[str, str]:
    """Each operation of ``source`` (GraphQL text whose top-level definitions each start a
    line) as its own document, by operation name: the operation, then each fragment it
    spreads, transitively, in first-spread order. Raises ``KeyError`` for a spread of a
    fragment ``source`` lacks."""
    starts = list(DEFINITION.finditer(source))
    operations: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for start, end in zip(starts, [*starts[1:], None], strict=True):
        text = source[start.start() : None if end is None else end.start()].strip() + "\n"
        kind, name = start.groups()
        (fragments if kind == "fragment" else operations)[name] = text
    documents = {}
    for name, text in operations.items():
        needed: list[str] = []
        pending = SPREAD.findall(text)
        while pending:
            fragment = pending.pop(0)
            if fragment not in needed:
                needed.append(fragment)
                pending += SPREAD.findall(fragments[fragment])
        documents[name] = "\n".join([text, *(fragments[n] for n in needed)])
    return documents


ALL = split(files("connector_store_client").joinpath("operations.graphql").read_text())
"""Every document by its operation's name."""

LEASE_OPERATIONS = ALL["LeaseOperations"]
RENEW_LEASES = ALL["RenewLeases"]
RELEASE_LEASES = ALL["ReleaseLeases"]
MARK_SENDS_STARTED = ALL["MarkSendsStarted"]
FINALIZE_OPERATIONS = ALL["FinalizeOperations"]
RECORD_OPERATIONS = ALL["RecordOperations"]
CLAIM_OPERATIONS = ALL["ClaimOperations"]
WORK_AVAILABLE = ALL["WorkAvailable"]
OPERATION_EVENTS = ALL["OperationEvents"]
OPERATION_EVENTS_HEAD = ALL["OperationEventsHead"]
THROTTLE_ACCOUNT = ALL["ThrottleAccount"]
OPERATION_COUNTS = ALL["OperationCounts"]
OPERATION_OUTCOME = ALL["OperationOutcome"]
