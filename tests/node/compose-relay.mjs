// Composition beside a typical Relay subgraph: reads our subgraph SDL (`_service { sdl }`)
// from the file given, composes it with a Relay subgraph that comments on our operations: it
// defines the `Node` interface and `Query.node` (shareable, as Federation 2 wants a root
// field two subgraphs define; the subgraphs share a runtime type of `Node`, `Operation`), and
// prints {"errors": [...]} (empty when it composes).
// Usage: node compose-relay.mjs SDL_FILE
import { composeServices } from '@apollo/composition';
import { readFileSync } from 'node:fs';
import { parse } from 'graphql';

const ours = readFileSync(process.argv[2], 'utf8');
const relay = `
  extend schema
    @link(url: "https://specs.apollo.dev/federation/v2.7", import: ["@key", "@shareable"])

  interface Node {
    id: ID!
  }

  "Comments on the store's operations: the store's entity, extended by its key."
  type Operation implements Node @key(fields: "callerDID operationID") {
    id: ID! @shareable
    callerDID: String!
    operationID: String!
    comments: [Comment!]!
  }

  type Comment implements Node {
    id: ID!
    text: String!
  }

  type Query {
    node(id: ID!): Node @shareable
  }
`;
const result = composeServices([
  { name: 'store', typeDefs: parse(ours), url: 'http://store' },
  { name: 'relay', typeDefs: parse(relay), url: 'http://relay' },
]);
console.log(JSON.stringify({ errors: (result.errors || []).map((error) => error.message) }));
