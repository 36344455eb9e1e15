// Compiled by tests/e2e/test_client_tools.py beside graphql-codegen's output (types.ts, operations.ts):
// the generated operation types are usable as they are, times as numbers.
import type {
  LeaseOperationsMutation,
  LeaseOperationsMutationVariables,
  OperationEventsSubscription,
} from "./operations";

type Leased = LeaseOperationsMutation["leaseOperations"]["operations"][number];

export const variables: LeaseOperationsMutationVariables = {
  input: { leaseToken: "worker-1", leaseMs: 30_000, limit: 100 },
};

export function leaseEnds(operation: Leased): number | null | undefined {
  const idempotencyKey: string = operation.deterministicEventID;
  return idempotencyKey ? operation.leaseExpiresAt : null;
}

export function eventAt(event: OperationEventsSubscription["operationEvents"]): number {
  return event.at;
}
