// Apollo Client with the documents of one operation each (graphql/documents/): it refuses a
// document holding several operations, so a client loads <OperationName>.graphql.
//
// Driven by tests/e2e/test_client_tools.py: claims one operation with ClaimOperations, reads
// it with GetOperation, and prints one JSON line: {"claimed", "state", "multiRefused"}.
//
//   node apollo-client.mjs HTTP_URL TOKEN
import { readFileSync } from "node:fs";
import { ApolloClient, HttpLink, InMemoryCache, gql } from "@apollo/client";

const [url, token] = process.argv.slice(2);
const documents = new URL("../../graphql/", import.meta.url);
const load = (path) => gql(readFileSync(new URL(path, documents), "utf8"));

const client = new ApolloClient({
  link: new HttpLink({ uri: url, headers: { Authorization: `Bearer ${token}` } }),
  cache: new InMemoryCache(),
});

const claim = {
  callerDID: "did:key:caller",
  operationID: "apollo-1",
  ownerDID: "did:key:owner",
  connectorName: "calendar",
  model: "Event",
  op: "update",
  accountKey: "acct-1",
  target: "events/1",
  sourceID: "evt-apollo-1",
  deterministicEventID: "det-apollo-1",
  payloadHash: "sha256:1",
};

let multiRefused = false;
try {
  await client.mutate({
    mutation: load("operations/worker.graphql"),
    variables: { input: { items: [claim] } },
  });
} catch {
  multiRefused = true;
}

const claimed = await client.mutate({
  mutation: load("documents/ClaimOperations.graphql"),
  variables: { input: { items: [claim] } },
});
const read = await client.query({
  query: load("documents/GetOperation.graphql"),
  variables: { callerDID: claim.callerDID, operationID: claim.operationID },
});
console.log(
  JSON.stringify({
    claimed: claimed.data.claimOperations.results[0].__typename,
    state: read.data.operation.state,
    multiRefused,
  }),
);
