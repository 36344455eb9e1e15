// The federation harness: a second small subgraph (reviews, in JS) that extends Operation by
// its key, composed with our live subgraph by @apollo/gateway's IntrospectAndCompose (which
// reads our `_service { sdl }`), and two queries through the gateway:
//   joined:     an Operation field from us beside a field the reviews subgraph adds;
//   references: Operation references returned by the reviews subgraph, resolved by the
//               gateway through our `_entities`.
// Usage: node gateway.mjs STORE_URL RESULT_FILE TOKEN CALLER_DID OPERATION_ID
// And federated tracing: our ftv1 trace, decoded by Apollo's protobuf Trace.
// Writes one JSON object to RESULT_FILE: {ftv1, sdlHasKey, joined, references}; exits 1 on a
// failure. The result goes to a file, not stdout: the gateway logs there what it likes.
// The reviews subgraph listens on a port the system chooses.
import { ApolloServer } from '@apollo/server';
import { startStandaloneServer } from '@apollo/server/standalone';
import { buildSubgraphSchema } from '@apollo/subgraph';
import { ApolloGateway, IntrospectAndCompose, RemoteGraphQLDataSource } from '@apollo/gateway';
import { writeFileSync } from 'node:fs';
import { parse } from 'graphql';
import usageReporting from '@apollo/usage-reporting-protobuf';

const { Trace } = usageReporting;

const [storeUrl, resultFile, token, callerDID, operationID] = process.argv.slice(2);

const reviewsTypeDefs = parse(`
  extend schema @link(url: "https://specs.apollo.dev/federation/v2.7", import: ["@key"])

  "An Operation as the reviews subgraph knows it: by its key, plus a review note."
  type Operation @key(fields: "callerDID operationID") {
    callerDID: String!
    operationID: String!
    "A reviewer's note on this operation (from the reviews subgraph)."
    reviewNote: String!
  }

  "A review that refers to an operation of the store subgraph."
  type Review {
    id: ID!
    "The reviewed operation; null when the store has none the viewer may see."
    operation: Operation
  }

  type Query {
    "Recent reviews; their operations are references the gateway resolves in the store."
    recentReviews: [Review!]!
  }
`);
const reviewsResolvers = {
  Operation: {
    __resolveReference: (ref) => ref,
    reviewNote: (operation) => `reviewed ${operation.operationID}`,
  },
  Query: {
    recentReviews: () => [
      { id: 'r1', operation: { callerDID, operationID } },
      { id: 'r2', operation: { callerDID, operationID: 'no-such-operation' } },
    ],
  },
};

const reviews = new ApolloServer({
  schema: buildSubgraphSchema({ typeDefs: reviewsTypeDefs, resolvers: reviewsResolvers }),
});
const { url: reviewsUrl } = await startStandaloneServer(reviews, {
  listen: { host: '127.0.0.1', port: 0 },
});

const gateway = new ApolloGateway({
  supergraphSdl: new IntrospectAndCompose({
    subgraphs: [
      { name: 'store', url: storeUrl },
      { name: 'reviews', url: reviewsUrl },
    ],
  }),
  buildService: ({ url }) =>
    new RemoteGraphQLDataSource({
      url,
      willSendRequest({ request }) {
        request.http.headers.set('authorization', `Bearer ${token}`);
      },
    }),
});
const server = new ApolloServer({ gateway });
let failed = false;
try {
  await server.start();
  const run = async (query, variables) => {
    const response = await server.executeOperation({ query, variables });
    return response.body.singleResult;
  };
  const sdl = await fetch(storeUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: '{ _service { sdl } }' }),
  }).then((r) => r.json());
  const joined = await run(
    `query Joined($callerDID: String!, $operationID: String!) {
       operation(callerDID: $callerDID, operationID: $operationID) {
         operationID state attempts reviewNote
       }
     }`,
    { callerDID, operationID },
  );
  const references = await run(
    `{ recentReviews { id operation { operationID state connectorName reviewNote } } }`,
  );
  // Federated tracing, asked for as a gateway that reports usage asks: the trace must be
  // a protobuf Trace that Apollo's own decoder reads.
  const traced = await fetch(storeUrl, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${token}`,
      'apollo-federation-include-trace': 'ftv1',
    },
    body: JSON.stringify({ query: '{ serverTime }' }),
  }).then((r) => r.json());
  const trace = Trace.decode(Buffer.from(traced.extensions.ftv1, 'base64'));
  const ftv1 = {
    rootFields: trace.root.child.map((node) => node.responseName),
    durationNs: Number(trace.durationNs),
  };
  writeFileSync(
    resultFile,
    JSON.stringify({
      ftv1,
      sdlHasKey: sdl.data._service.sdl.includes('@key(fields: "callerDID operationID")'),
      joined,
      references,
    }),
  );
} catch (error) {
  failed = true;
  console.error(error);
} finally {
  await server.stop();
  await reviews.stop();
}
process.exit(failed ? 1 : 0);
