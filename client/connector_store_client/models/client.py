from collections.abc import AsyncIterator
from typing import Any, Optional, Union

from .async_base_client import AsyncBaseClient
from .base_model import UNSET, UnsetType
from .claim_operations import ClaimOperations
from .finalize_operations import FinalizeOperations
from .input_types import (
    ClaimOperationsInput,
    FinalizeOperationsInput,
    LeaseOperationsInput,
    MarkSendsStartedInput,
    OperationFilter,
    RecordOperationsInput,
    ReleaseLeasesInput,
    RenewLeasesInput,
    ThrottleAccountInput,
)
from .lease_operations import LeaseOperations
from .mark_sends_started import MarkSendsStarted
from .operation_counts import OperationCounts
from .operation_events import OperationEvents
from .operation_events_head import OperationEventsHead
from .operation_outcome import OperationOutcome
from .record_operations import RecordOperations
from .release_leases import ReleaseLeases
from .renew_leases import RenewLeases
from .throttle_account import ThrottleAccount
from .work_available import WorkAvailable


def gql(q: str) -> str:
    return q


class Client(AsyncBaseClient):
    async def lease_operations(
        self, input: LeaseOperationsInput, **kwargs: Any
    ) -> LeaseOperations:
        query = gql("""
            mutation LeaseOperations($input: LeaseOperationsInput!) {
              leaseOperations(input: $input) {
                operations {
                  ...LeasedOperation
                }
              }
            }

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
            """)
        variables: dict[str, object] = {"input": input}
        response = await self.execute(
            query=query, operation_name="LeaseOperations", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return LeaseOperations.model_validate(data)

    async def renew_leases(self, input: RenewLeasesInput, **kwargs: Any) -> RenewLeases:
        query = gql("""
            mutation RenewLeases($input: RenewLeasesInput!) {
              renewLeases(input: $input) {
                renewed {
                  callerDID
                  operationID
                  leaseExpiresAt
                }
              }
            }
            """)
        variables: dict[str, object] = {"input": input}
        response = await self.execute(
            query=query, operation_name="RenewLeases", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return RenewLeases.model_validate(data)

    async def release_leases(
        self, input: ReleaseLeasesInput, **kwargs: Any
    ) -> ReleaseLeases:
        query = gql("""
            mutation ReleaseLeases($input: ReleaseLeasesInput!) {
              releaseLeases(input: $input) {
                released {
                  callerDID
                  operationID
                }
              }
            }
            """)
        variables: dict[str, object] = {"input": input}
        response = await self.execute(
            query=query, operation_name="ReleaseLeases", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return ReleaseLeases.model_validate(data)

    async def mark_sends_started(
        self, input: MarkSendsStartedInput, **kwargs: Any
    ) -> MarkSendsStarted:
        query = gql("""
            mutation MarkSendsStarted($input: MarkSendsStartedInput!) {
              markSendsStarted(input: $input) {
                results {
                  applied
                  operation {
                    ...Settled
                  }
                }
              }
            }

            fragment Settled on Operation {
              callerDID
              operationID
              state
              version
              leaseToken
            }
            """)
        variables: dict[str, object] = {"input": input}
        response = await self.execute(
            query=query,
            operation_name="MarkSendsStarted",
            variables=variables,
            **kwargs,
        )
        data = self.get_data(response)
        return MarkSendsStarted.model_validate(data)

    async def finalize_operations(
        self, input: FinalizeOperationsInput, **kwargs: Any
    ) -> FinalizeOperations:
        query = gql("""
            mutation FinalizeOperations($input: FinalizeOperationsInput!) {
              finalizeOperations(input: $input) {
                results {
                  applied
                  operation {
                    ...Settled
                  }
                }
              }
            }

            fragment Settled on Operation {
              callerDID
              operationID
              state
              version
              leaseToken
            }
            """)
        variables: dict[str, object] = {"input": input}
        response = await self.execute(
            query=query,
            operation_name="FinalizeOperations",
            variables=variables,
            **kwargs,
        )
        data = self.get_data(response)
        return FinalizeOperations.model_validate(data)

    async def record_operations(
        self, input: RecordOperationsInput, **kwargs: Any
    ) -> RecordOperations:
        query = gql("""
            mutation RecordOperations($input: RecordOperationsInput!) {
              recordOperations(input: $input) {
                results {
                  applied
                  operation {
                    ...Settled
                  }
                }
              }
            }

            fragment Settled on Operation {
              callerDID
              operationID
              state
              version
              leaseToken
            }
            """)
        variables: dict[str, object] = {"input": input}
        response = await self.execute(
            query=query,
            operation_name="RecordOperations",
            variables=variables,
            **kwargs,
        )
        data = self.get_data(response)
        return RecordOperations.model_validate(data)

    async def claim_operations(
        self, input: ClaimOperationsInput, **kwargs: Any
    ) -> ClaimOperations:
        query = gql("""
            mutation ClaimOperations($input: ClaimOperationsInput!) {
              claimOperations(input: $input) {
                results {
                  __typename
                  ... on OperationClaimed {
                    operation {
                      ...Settled
                    }
                  }
                  ... on OperationExists {
                    operation {
                      ...Settled
                    }
                  }
                  ... on OperationConflict {
                    callerDID
                    operationID
                    message
                  }
                  ... on OperationCollected {
                    callerDID
                    operationID
                    finalState
                    collectedAt
                  }
                }
              }
            }

            fragment Settled on Operation {
              callerDID
              operationID
              state
              version
              leaseToken
            }
            """)
        variables: dict[str, object] = {"input": input}
        response = await self.execute(
            query=query, operation_name="ClaimOperations", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return ClaimOperations.model_validate(data)

    async def work_available(
        self, connector_name: Union[Optional[str], UnsetType] = UNSET, **kwargs: Any
    ) -> AsyncIterator[WorkAvailable]:
        query = gql("""
            subscription WorkAvailable($connectorName: String) {
              workAvailable(connectorName: $connectorName) {
                connectorName
                at
              }
            }
            """)
        variables: dict[str, object] = {"connectorName": connector_name}
        async for data in self.execute_ws(
            query=query, operation_name="WorkAvailable", variables=variables, **kwargs
        ):
            yield WorkAvailable.model_validate(data)

    async def operation_events_head(self, **kwargs: Any) -> OperationEventsHead:
        query = gql("""
            query OperationEventsHead {
              operationEventsHead
            }
            """)
        variables: dict[str, object] = {}
        response = await self.execute(
            query=query,
            operation_name="OperationEventsHead",
            variables=variables,
            **kwargs,
        )
        data = self.get_data(response)
        return OperationEventsHead.model_validate(data)

    async def operation_events(
        self,
        filter_: Union[Optional[OperationFilter], UnsetType] = UNSET,
        after: Union[Optional[str], UnsetType] = UNSET,
        **kwargs: Any,
    ) -> AsyncIterator[OperationEvents]:
        query = gql("""
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
                operation {
                  callerDID
                  operationID
                  connectorName
                  accountKey
                  state
                  version
                  updatedAt
                }
              }
            }
            """)
        variables: dict[str, object] = {"filter": filter_, "after": after}
        async for data in self.execute_ws(
            query=query, operation_name="OperationEvents", variables=variables, **kwargs
        ):
            yield OperationEvents.model_validate(data)

    async def throttle_account(
        self, input: ThrottleAccountInput, **kwargs: Any
    ) -> ThrottleAccount:
        query = gql("""
            mutation ThrottleAccount($input: ThrottleAccountInput!) {
              throttleAccount(input: $input) {
                account {
                  connectorName
                  accountKey
                  throttledUntil
                }
              }
            }
            """)
        variables: dict[str, object] = {"input": input}
        response = await self.execute(
            query=query, operation_name="ThrottleAccount", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return ThrottleAccount.model_validate(data)

    async def operation_counts(
        self, connector_name: Union[Optional[str], UnsetType] = UNSET, **kwargs: Any
    ) -> OperationCounts:
        query = gql("""
            query OperationCounts($connectorName: String) {
              operationCounts(connectorName: $connectorName) {
                state
                count
              }
            }
            """)
        variables: dict[str, object] = {"connectorName": connector_name}
        response = await self.execute(
            query=query, operation_name="OperationCounts", variables=variables, **kwargs
        )
        data = self.get_data(response)
        return OperationCounts.model_validate(data)

    async def operation_outcome(
        self, caller_did: str, operation_id: str, **kwargs: Any
    ) -> OperationOutcome:
        query = gql("""
            query OperationOutcome($callerDID: String!, $operationID: String!) {
              operation(callerDID: $callerDID, operationID: $operationID) {
                callerDID
                operationID
                state
                attempts
                lastKind
                lastError
                resultEntity
              }
            }
            """)
        variables: dict[str, object] = {
            "callerDID": caller_did,
            "operationID": operation_id,
        }
        response = await self.execute(
            query=query,
            operation_name="OperationOutcome",
            variables=variables,
            **kwargs,
        )
        data = self.get_data(response)
        return OperationOutcome.model_validate(data)
