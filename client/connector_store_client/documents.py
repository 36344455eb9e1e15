"""The GraphQL documents the client sends, one operation each (a test validates them against
the server's client SDL, ``graphql/client-schema.graphql``)."""

LEASED_OPERATION = """
fragment LeasedOperation on Operation {
  callerDID
  operationID
  ownerDID
  connectorName
  model
  op
  accountKey
  target
  sourceID
  documentID
  deterministicEventID
  payloadHash
  reissueIntent
  providerEtag
  attempts
  version
  sendMarker
  leaseExpiresAt
}
"""

SETTLED = """
fragment Settled on Operation {
  callerDID
  operationID
  state
  version
  leaseToken
}
"""

LEASE_OPERATIONS = (
    """
mutation LeaseOperations($input: LeaseOperationsInput!) {
  leaseOperations(input: $input) { operations { ...LeasedOperation } }
}
"""
    + LEASED_OPERATION
)

RENEW_LEASES = """
mutation RenewLeases($input: RenewLeasesInput!) {
  renewLeases(input: $input) { renewed { callerDID operationID leaseExpiresAt } }
}
"""

RELEASE_LEASES = """
mutation ReleaseLeases($input: ReleaseLeasesInput!) {
  releaseLeases(input: $input) { released { callerDID operationID } }
}
"""

MARK_SENDS_STARTED = (
    """
mutation MarkSendsStarted($input: MarkSendsStartedInput!) {
  markSendsStarted(input: $input) { results { applied operation { ...Settled } } }
}
"""
    + SETTLED
)

FINALIZE_OPERATIONS = (
    """
mutation FinalizeOperations($input: FinalizeOperationsInput!) {
  finalizeOperations(input: $input) { results { applied operation { ...Settled } } }
}
"""
    + SETTLED
)

RECORD_OPERATIONS = (
    """
mutation RecordOperations($input: RecordOperationsInput!) {
  recordOperations(input: $input) { results { applied operation { ...Settled } } }
}
"""
    + SETTLED
)

CLAIM_OPERATIONS = (
    """
mutation ClaimOperations($input: ClaimOperationsInput!) {
  claimOperations(input: $input) {
    results {
      __typename
      ... on OperationClaimed { operation { ...Settled } }
      ... on OperationExists { operation { ...Settled } }
      ... on OperationConflict { callerDID operationID message }
      ... on OperationCollected { callerDID operationID finalState collectedAt }
    }
  }
}
"""
    + SETTLED
)

WORK_AVAILABLE = """
subscription WorkAvailable($connectorName: String) {
  workAvailable(connectorName: $connectorName) { connectorName at }
}
"""

OPERATION_EVENTS = """
subscription OperationEvents($filter: OperationFilter, $after: String) {
  operationEvents(filter: $filter, after: $after) {
    sequence
    at
    action
    actorDID
    fromState
    toState
    attempts
    kind
    httpStatus
    message
    operation { callerDID operationID connectorName accountKey state version updatedAt }
  }
}
"""

ALL = {
    "LeaseOperations": LEASE_OPERATIONS,
    "RenewLeases": RENEW_LEASES,
    "ReleaseLeases": RELEASE_LEASES,
    "MarkSendsStarted": MARK_SENDS_STARTED,
    "FinalizeOperations": FINALIZE_OPERATIONS,
    "RecordOperations": RECORD_OPERATIONS,
    "ClaimOperations": CLAIM_OPERATIONS,
    "WorkAvailable": WORK_AVAILABLE,
    "OperationEvents": OPERATION_EVENTS,
}
"""Every document by its operation's name."""

THROTTLE_ACCOUNT = """
mutation ThrottleAccount($input: ThrottleAccountInput!) {
  throttleAccount(input: $input) { account { connectorName accountKey throttledUntil } }
}
"""
ALL["ThrottleAccount"] = THROTTLE_ACCOUNT
