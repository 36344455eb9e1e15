"""The descriptions of fields, arguments, input fields, enum values and types that are not
written beside their definition: most are keys and values shared by many types (``callerDID``
means the same everywhere), so each is said once here, by name, with ``Type.name`` entries
where one type's field means something of its own. ``describe`` fills in only what the
definitions left empty; ``tests/test_schema_descriptions.py`` fails on anything still empty.

Times are ``EpochMillis`` (milliseconds since the Unix epoch) unless said otherwise.
"""

from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLObjectType,
    GraphQLSchema,
)

from store.operator import DEFAULT_LIMIT, MAX_FAILURE_GROUPS
from store.stats import MAX_BUCKETS

MUTATION_ERRORS = (
    " Errors: UNAUTHENTICATED (no valid token); FORBIDDEN (a right is missing, or the input "
    "names another DID than the token's and the token is not a service's); BAD_USER_INPUT "
    "(a malformed value; `extensions.field` names it); CONFLICT (a compare-and-set lost every "
    "retry; nothing was written, send it again); SERVICE_UNAVAILABLE (the database could not "
    "serve the call; retry); INTERNAL_SERVER_ERROR (a bug; `extensions.requestId` finds it in "
    "the log)."
)

BY_NAME: dict[str, str] = {
    "id": "The global id: opaque; `node(id:)` fetches the object again.",
    "callerDID": "The DID of the caller that claimed the operation (first half of its key).",
    "operationID": "The caller's id of the operation (second half of its key).",
    "nodeKey": "The operation's single-string key (the one its global id carries).",
    "ownerDID": "The DID of the owner of the data.",
    "connectorName": "The connector's name (e.g. `calendar`).",
    "model": "The provider model of the entity (e.g. `Event`).",
    "op": "The kind of write, as the connector names it (e.g. `update`).",
    "accountKey": "The provider account the entity belongs to.",
    "target": "Where the write goes at the provider (a path or resource name).",
    "sourceID": "The provider's id of the entity.",
    "deterministicEventID": "An id derived from the change, the same on every retry.",
    "payloadHash": "A digest of the payload to write; the envelope's identity.",
    "reissueIntent": "What a reissue must carry (JSON); null when there is nothing to reissue.",
    "providerEtag": "The provider's ETag of the entity after the last write; null when unknown.",
    "documentID": "The id of the document the entity belongs to; null when there is none.",
    "resultEntity": "The entity the provider returned on commit (JSON); null until committed.",
    "state": "Where the operation is in its life; all but ATTEMPTED are final.",
    "attempts": "How many attempts were counted (see `recordOperation`'s `countAttempt`).",
    "nextAttemptAt": "When the next attempt is due (epoch ms); null when none is planned.",
    "deferReason": "Why it waits (OFFLINE or AUTH); null when it does not wait.",
    "lastKind": "The kind of the last recorded outcome (the worker's word); null before one.",
    "lastHttpStatus": "The provider's HTTP status of the last attempt; null when none.",
    "errorMessage": (
        "What went wrong, for people (at most 2,048 bytes of UTF-8; longer is BAD_USER_INPUT "
        "naming errorMessage, and nothing is written): kept on the write's event and as "
        "lastError until the next such write; null clears lastError."
    ),
    "events": "What happened to it, one event per write, oldest first.",
    "sequence": (
        "The event's place in its log: opaque, and ordered as the log is (pass it as "
        "`after` to read what followed)."
    ),
    "at": (
        "When the write took effect: on PostgreSQL the database's clock as the write was "
        "applied (not its transaction's start), on SQLite the store's clock."
    ),
    "actorDID": "The DID of the token that made the write; null for the server itself.",
    "fromStatus": (
        "The watch's status before the write; null for its first event, and for its first "
        "kept one once older ones were collected."
    ),
    "toStatus": "The watch's status after the write.",
    "lastError": (
        "The error message of the last recordOperation or deferOperation (on a watch: of the "
        "last recordVerification), kept until the next such write; null when it gave none."
    ),
    "sendMarker": "The run that marked the current attempt as sent; null when unmarked.",
    "version": "The row's version, raised by each state transition (recordOperation, "
    "finalizeOperation, cancelOperations); lease, mark and defer writes leave it. "
    "Compare-and-set writes present it.",
    "incarnation": "The row's incarnation: new when the row is created again after a delete.",
    "leaseExpiresAt": "When the lease ends (epoch ms); null when no lease is held.",
    "createdAt": "When the row was created (epoch ms).",
    "updatedAt": "When the row was last written (epoch ms).",
    "repairGeneration": "The number of the current repair generation (an arm that opens one "
    "raises it).",
    "verificationStatus": "Where the watch's verification stands.",
    "verificationAttempts": "How many verification attempts the current generation has had.",
    "observedWinnerDigest": "The digest of the winning document state last observed; null "
    "before one.",
    "verifiedStateDigest": "The digest the provider was last verified to hold; null before.",
    "claimedUntil": "Until when a verifier holds the attempt (epoch ms); null when unclaimed.",
    "cursor": "An opaque cursor: pass it as `after` for the items past this one.",
    "node": "The item.",
    "edges": "The items of this page, each with its cursor.",
    "pageInfo": "Where this page stands in the whole list.",
    "hasNextPage": "True when items follow this page.",
    "hasPreviousPage": "True when items come before this page (a page after a cursor).",
    "startCursor": "The cursor of the page's first item; null for an empty page.",
    "endCursor": "The cursor of the page's last item; null for an empty page.",
    "filter": "Which items to list; omitted: all the viewer may see.",
    "first": "At most this many items (1 to 500, default 50).",
    "after": "The cursor of the last item already seen; omitted: from the start.",
    "now": "The time to compare against (epoch ms); pass `serverTime` or the worker's clock.",
    "limit": "At most this many items (1 to 500, default 100).",
    "identity": "The watch's key: owner, connector, model, account and source.",
    "documentIDs": "Only these documents; an empty list matches nothing.",
    "status": "The status to match or set.",
    "input": "The mutation's input.",
    "provider": "The OAuth provider's name.",
    "ownerWrappableDID": "The owner's DID for wrapping the grant; null when not given.",
    "controllerWrappableDID": "The controller's DID for wrapping the grant; null when not given.",
    "redirectURL": "Where the OAuth callback redirects.",
    "scopes": "The OAuth scopes asked for.",
    "incremental": "Whether it adds scopes to a grant the owner already has.",
    "codeVerifier": "The PKCE code verifier (a secret).",
    "expiresAt": "When it expires (epoch ms).",
    "checkpoint": "The connector's sync checkpoint (JSON); null when none.",
    "entityCount": "How many entities the sync has seen.",
    "error": "The last sync error's text; null when none.",
    "recovery": "What recovering from the last error needs (JSON); null when nothing.",
    "lastSyncedAt": "When the last sync finished, as the connector writes it (an ISO-8601 "
    "string with an offset).",
    "token": "The lease token: the caller's secret for this attempt.",
    "leaseToken": "The lease token the caller holds: compared with the stored token, not the "
    "clock (a lapsed lease still settles until another token takes it or an operator frees it).",
    "marker": "The id of the run that sends the attempt.",
    "reason": "Why it waits: OFFLINE or AUTH.",
    "fromState": "The state the operation must be in.",
    "toState": "The state to move it to.",
    "countAttempt": "Count this attempt (default true).",
    "refundAttempt": "Take one counted attempt back instead of counting one (only when "
    "attempts > 0 and the marker is absent or `sendMarker`; default false).",
    "kind": "The kind of outcome, in the worker's words (kept as `lastKind`); `cancelled` is "
    "refused: it is cancelOperations' own.",
    "httpStatus": "The provider's HTTP status of this attempt.",
    "dueAt": "When the watch's next verification is due (epoch ms).",
    "triggeringWinner": "The digest of the document state that triggered the arm; null when none.",
    "generation": "The repair generation the caller works on; a stale one is not applied.",
    "until": "Until when to hold the attempt (epoch ms).",
    "fetchedDigest": "The digest of what the provider holds now; null when the entity is gone.",
    "maxAttempts": "When the attempts reach this many, the watch becomes REPAIR_FAILED.",
    "winnerDigest": "The digest of the document's new winning state.",
    "connectorNames": "The connectors whose AUTH-deferred work to resume.",
    "cutoff": "Records with `expiresAt` before this time (epoch ms) are deleted.",
    "olderThan": "COMMITTED and SUPERSEDED operations last updated before this time (epoch "
    "ms) are deleted.",
    "failedOlderThan": "FAILED operations last updated before this time (epoch ms) are "
    "deleted; omitted: the server's now minus `RETAIN_FAILED_SECONDS` (30 days by default).",
    "applied": "True when the write was applied; false when its guard did not hold (nothing "
    "was written).",
    "operation": "The operation as it now stands; null when there is none the viewer may see.",
    "watch": "The watch as it now stands; null when there is none the viewer may see.",
    "outcome": "What the call did.",
    "results": "What the ingress did to each watch of the document.",
    "resumedOperations": "How many operations were made due.",
    "resumedWatches": "How many watches were made due.",
    "pendingAuth": "The pending authorization as stored (without the code verifier).",
    "deleted": "How many rows were deleted (or, for one row, whether it was).",
    "syncState": "The sync state as it now stands.",
    "message": "What conflicts, in words.",
}

BY_FIELD: dict[str, str] = {
    "WatchEvent.generation": "The watch's repair generation after the write.",
    "OperationEvent.toState": "The operation's state after the write.",
    "OperationEvent.fromState": "The operation's state before the write; null for its first "
    "event, and for its first kept one once older ones were collected.",
    "OperationEvent.attempts": "The operation's attempts after the write.",
    "OperationEvent.kind": "A recorded outcome's kind (or `cancelled`); null for others.",
    "OperationEvent.httpStatus": "A recorded outcome's HTTP status; null for others.",
    "OperationEvent.message": (
        "The write's error message (recordOperation, deferOperation) or cancel reason; null "
        "for others."
    ),
    "WatchEvent.verificationAttempts": "The watch's verification attempts after the write.",
    "WatchEvent.message": "A verification's error message; null for others.",
    "OperationEvent.action": "What the write did.",
    "WatchEvent.action": "What the write did.",
    "Operation.state": "Where the operation is in its life; all but ATTEMPTED are final.",
    "Watch.nextAttemptAt": "When the next verification is due (epoch ms); null when none.",
    "Watch.deferReason": "Why verification waits (OFFLINE or AUTH); null when it does not.",
    "Watch.version": "The watch's version, raised by every write.",
    "SyncState.status": "The sync's status.",
    "WatchFilter.status": "Only watches with this verification status.",
    "WatchFilter.ownerDID": "Only this owner's watches.",
    "WatchFilter.connectorName": "Only this connector's watches.",
    "WatchFilter.model": "Only watches of this model.",
    "OperationFilter.nodeKey": "Only the operation with this node key.",
    "OperationFilter.callerDID": "Only operations of this caller.",
    "OperationFilter.operationID": "Only operations with this operation id.",
    "OperationFilter.connectorName": "Only operations of this connector.",
    "SetSyncStateInput.status": "The sync's status.",
    "Query.operation(callerDID)": "The caller's DID (first half of the key).",
    "Query.node(id)": "A global id from an `id` field. A malformed, unknown or foreign id "
    "gives null and a NOT_FOUND error.",
    "Query.pendingAuth(state)": "The OAuth `state` naming the authorization.",
    "Query.watchByDocument(documentID)": "The document's id.",
    "Query.syncState(ownerDID)": "The owner's DID.",
    "Query.dueOperations(connectorName)": "Only this connector's operations; omitted: all.",
    "Query.dueWatches(connectorName)": "Only this connector's watches; omitted: all.",
    "Query.operationCounts(connectorName)": "Only this connector's operations; omitted: all.",
    "Query.operationStats(since)": "Where the window begins (epoch ms, inclusive).",
    "Query.operationStats(until)": "Where the window ends (epoch ms, exclusive); omitted: "
    "the server's now.",
    "Query.operationStats(bucketMs)": "Each bucket's length in ms, giving at most "
    f"{MAX_BUCKETS:,} buckets from `since` to `until`; the last one ends at `until` and may "
    "be shorter.",
    "Query.operationStats(connectorName)": "Only this connector's operations; omitted: all.",
    "Query.operationStats(accountKey)": "Only this provider account's operations; omitted: all.",
    "Query.failureGroups(first)": f"At most this many groups (1 to {MAX_FAILURE_GROUPS:,}, "
    f"default {DEFAULT_LIMIT}).",
    "Query.operations(last)": "Backwards: at most this many items before `before` (1 to 500, "
    "default 50), in the list's order.",
    "Query.operations(before)": "The cursor of the first item already seen, paging "
    "backwards; omitted with `last`: the last page.",
    "Query.operations(orderBy)": "The list's order: OLDEST_FIRST (omitted) or NEWEST_FIRST.",
    "Query.watchCounts(connectorName)": "Only this connector's watches; omitted: all.",
    "Query.cancellableCount(filter)": "The filter cancelOperations would be given; an empty "
    "one counts nothing.",
    "Query.reissuableCount(filter)": "The filter reissueOperations would be given; an empty "
    "one counts nothing.",
    "Query.reissuableCount(include)": "The risks reissueOperations would be told to include "
    "(omitted: none).",
    "Query.rearmableCount(filter)": "The filter rearmWatches would be given.",
    "WatchCount.status": "The verification status counted.",
    "OperationCount.state": "The state counted.",
    "Query.syncStates(connectorName)": "The connector's name.",
    "ConsumePendingAuthInput.state": "The OAuth `state` the callback received.",
    "CreatePendingAuthInput.state": "The OAuth `state` naming this authorization.",
    "CreatePendingAuthInput.createdAt": "When the authorization began (epoch ms).",
    "ConsumedPendingAuth.createdAt": "When the authorization began (epoch ms).",
    "PendingAuth.createdAt": "When the authorization began (epoch ms).",
    "DeferOperationInput.leaseToken": "The lease token, when the caller holds the lease; "
    "omitted: the lease must be free.",
    "DeferOperationInput.nextAttemptAt": "When the operation is due again (epoch ms); give "
    "this or delayMs.",
    "DeferOperationInput.delayMs": "Due again this many ms after the store's now (0 to "
    "2,147,483,647), instead of nextAttemptAt: no serverTime round trip.",
    "RecordOperationInput.delayMs": "Due again this many ms after the store's now (0 to "
    "2,147,483,647), instead of nextAttemptAt: no serverTime round trip.",
    "FinalizeOperationInput.delayMs": "The armed watch's verification is due this many ms "
    "after the store's now (0 to 2,147,483,647), instead of dueAt: no serverTime round trip.",
    "ClaimOperationInput.leaseMs": "The first lease lasts this many ms from the store's now "
    "(1,000 to 3,600,000), instead of leaseExpiresAt. Omit leaseToken, leaseExpiresAt and "
    "leaseMs to enqueue: the operation is claimed unleased, due at once for leaseOperations.",
    "AcquireLeaseInput.leaseToken": "The lease token to take the lease with (give this, not "
    "the deprecated token).",
    "AcquireLeaseInput.leaseExpiresAt": "When the lease ends (epoch ms, 1,000 to 3,600,000 "
    "ms after the store's now); give this or leaseMs.",
    "AcquireLeaseInput.leaseMs": "The lease lasts this many ms from the store's now (1,000 "
    "to 3,600,000); give this or leaseExpiresAt.",
    "RenewLeaseInput.leaseToken": "The lease token that holds the lease (give this, not the "
    "deprecated token).",
    "RenewLeaseInput.leaseExpiresAt": "When the lease now ends (epoch ms, 1,000 to "
    "3,600,000 ms after the store's now); give this or leaseMs.",
    "RenewLeaseInput.leaseMs": "The lease now lasts this many ms from the store's now (1,000 "
    "to 3,600,000); give this or leaseExpiresAt.",
    "ReleaseLeaseInput.leaseToken": "The lease token that holds the lease (give this, not the "
    "deprecated token).",
    "DeferWatchInput.nextAttemptAt": "When the attempt is due again (epoch ms); give this "
    "or delayMs.",
    "DeferWatchInput.delayMs": "Due again this many ms after the store's now (0 to "
    "2,147,483,647), instead of nextAttemptAt: no serverTime round trip.",
    "ArmWatchInput.dueAt": "When the watch is due (epoch ms); give this or delayMs.",
    "ArmWatchInput.delayMs": "Due this many ms after the store's now (0 to 2,147,483,647), "
    "instead of dueAt: no serverTime round trip.",
    "ClaimWatchAttemptInput.until": "When the claim ends (epoch ms, 1,000 to 3,600,000 ms "
    "after the store's now); give this or leaseMs.",
    "ClaimWatchAttemptInput.leaseMs": "The claim lasts this many ms from the store's now "
    "(1,000 to 3,600,000), instead of until: no serverTime round trip.",
    "ClaimWatchAttemptInput.now": "The caller's now (epoch ms), counted only up to the "
    "store's clock; omitted: the store's clock.",
    "RecordVerificationInput.dueAt": "When a mismatch is due again (epoch ms); give this or "
    "delayMs.",
    "RecordVerificationInput.delayMs": "A mismatch is due again this many ms after the "
    "store's now (0 to 2,147,483,647), instead of dueAt: no serverTime round trip.",
    "RecordIngressInput.delayMs": "The armed watches are due this many ms after the store's "
    "now (0 to 2,147,483,647), instead of dueAt: no serverTime round trip.",
    "DeferWatchInput.claimedUntil": "The claim's `claimedUntil` the caller holds.",
    "RecordVerificationInput.claimedUntil": "The claim's `claimedUntil`, when the attempt "
    "was claimed.",
    "RecordOperationInput.nextAttemptAt": "When the operation is due again (epoch ms); null "
    "leaves it as is.",
    "RecordOperationInput.deferReason": "Why it waits; null when it does not.",
    "RecordOperationInput.providerEtag": "The provider's ETag after this attempt, if known.",
    "RecordOperationInput.sendMarker": "The run that marked the attempt, when it did.",
    "FinalizeOperationInput.version": "The operation's version the caller read.",
    "FinalizeOperationInput.resultEntity": "The entity the provider returned (JSON).",
    "FinalizeOperationInput.dueAt": "When the armed watch's verification is due (epoch ms); "
    "give this or delayMs.",
    "FinalizeOperationInput.documentID": "The document id to record, when it became known.",
    "FinalizeOperationInput.providerEtag": "The provider's ETag after the write, if known.",
    "ClaimOperationInput.leaseExpiresAt": "When the first lease ends (epoch ms, 1,000 to "
    "3,600,000 ms after the store's now); give this or leaseMs with a leaseToken.",
    "ClaimOperationInput.leaseToken": "The lease token of the first attempt (the claim takes "
    "the lease where leasing allows it); omitted (with no expiry): the claim enqueues.",
    "ClaimOperationInput.reissueIntent": "What a reissue must carry (JSON), if anything.",
    "ClaimOperationInput.providerEtag": "The provider's ETag the write starts from, if known.",
    "ClaimOperationInput.documentID": "The document the entity belongs to, if known.",
    "RecordIngressInput.dueAt": "When the armed watches are due (epoch ms); omitted (and "
    "no delayMs): now.",
    "RecordIngressInput.documentID": "The document that has a new winner.",
    "ArmWatchInput.reason": "Why it is armed: INGRESS or MANUAL.",
    "ArmWatchPayload.watch": "The watch as it now stands; null when there is no watch.",
    "FinalizeOperationPayload.watch": "The watch the finalize armed; null when the finalize "
    "was not applied.",
    "OperationClaimed.operation": "The operation this claim created.",
    "OperationExists.operation": "The operation claimed before with the same envelope.",
    "OperationConflict.callerDID": "The caller's DID of the key.",
    "OperationConflict.operationID": "The operation id of the key.",
    "OperationCollected.callerDID": "The caller's DID of the key.",
    "OperationCollected.operationID": "The operation id of the key.",
    "OperationCollected.finalState": "The state the operation was collected in (COMMITTED, "
    "FAILED or SUPERSEDED).",
    "OperationCollected.collectedAt": "When the operation was collected (epoch ms).",
    "DeleteSyncStatePayload.deleted": "Whether a sync state was deleted.",
    "SetSyncStatePayload.syncState": "The sync state as written.",
    "UpdateSyncProgressInput.version": "The sync state's version the caller read.",
    "UpdateSyncProgressInput.incarnation": "The sync state's incarnation the caller read.",
    "UpdateSyncProgressPayload.syncState": "The sync state as it now stands; null when there "
    "is none.",
    "SyncState.connectorName": "The connector's name.",
    "SyncState.ownerDID": "The owner's DID.",
}

TYPES: dict[str, str] = {
    "Query": "Reads. Every field needs a bearer token; rows of other tenants read as null or "
    "are left out of lists.",
    "Mutation": "Writes. A tenant writes only rows of its own DID; a service token writes any.",
    "Subscription": "Streams, over graphql-transport-ws on /graphql (the token in "
    "connection_init's payload `Authorization` or the upgrade's header) or Apollo's multipart "
    "protocol over HTTP. Each field has the rights of the queries; a stream ends when its "
    "token expires.",
    "OperationEdge": "An operation in a page, with its cursor.",
    "WatchEdge": "A watch in a page, with its cursor.",
    "SyncStateEdge": "A sync state in a page, with its cursor.",
    "OperationEventEdge": "An operation's event in a page, with its cursor (its `sequence`).",
    "WatchEventEdge": "A watch's event in a page, with its cursor (its `sequence`).",
    "ClaimOperationResult": "What a claim did: OperationClaimed, OperationExists, "
    "OperationConflict or OperationCollected.",
}

ENUM_VALUES: dict[str, str] = {
    "OperationOrder.OLDEST_FIRST": "The first created first (ties: by caller, then operation id).",
    "OperationOrder.NEWEST_FIRST": "The last created first: OLDEST_FIRST reversed.",
    "OperationState.ATTEMPTED": "Live: being written, or due to be tried again.",
    "OperationState.COMMITTED": "Final: the provider has the write.",
    "OperationState.FAILED": "Final: given up.",
    "OperationState.SUPERSEDED": "Final: a later operation on the same entity replaced it.",
    "DeferReason.OFFLINE": "The provider was unreachable; resumed by `resumeOfflineDeferred`.",
    "DeferReason.AUTH": "The owner's authorization is missing or expired; resumed by "
    "`resumeAuthDeferred`.",
    "VerificationStatus.PENDING_VERIFICATION": "A repair generation waits to be verified.",
    "VerificationStatus.VERIFIED": "The provider holds what the document says.",
    "VerificationStatus.REPAIR_FAILED": "Verification failed `maxAttempts` times.",
    "SyncStatus.IDLE": "Not syncing.",
    "SyncStatus.SYNCING": "A sync is running.",
    "SyncStatus.ERROR": "The last sync failed; `error` says why.",
    "ArmReason.INGRESS": "The document has a new winner.",
    "ArmReason.MANUAL": "Asked for by hand: always opens a repair generation.",
}


def describe(schema: GraphQLSchema) -> None:
    """Fill in the empty descriptions of ``schema`` from the tables above; a mutation's
    description gets the errors it can give."""
    for name, type_ in schema.type_map.items():
        if name.startswith("_"):
            continue
        if not type_.description and name in TYPES:
            type_.description = TYPES[name]
        if isinstance(type_, GraphQLEnumType):
            for value_name, value in type_.values.items():
                value.description = value.description or ENUM_VALUES.get(f"{name}.{value_name}")
        if not isinstance(type_, GraphQLObjectType | GraphQLInterfaceType | GraphQLInputObjectType):
            continue
        for field_name, field in type_.fields.items():
            if not field.description:
                field.description = BY_FIELD.get(f"{name}.{field_name}") or BY_NAME.get(field_name)
            if name == "Mutation" and field.description and "Errors:" not in field.description:
                field.description += MUTATION_ERRORS
            for arg_name, arg in getattr(field, "args", {}).items():
                arg.description = arg.description or (
                    BY_FIELD.get(f"{name}.{field_name}({arg_name})") or BY_NAME.get(arg_name)
                )
