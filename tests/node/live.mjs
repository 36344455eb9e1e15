// A graphql-ws client (the `graphql-ws` library over `ws`) subscribed to workAvailable (or,
// with LIVE_QUERY and LIVE_VARIABLES in the environment, to that document), driven by
// tests/api/test_live_node.py: prints each result, or how the connection ended, as one JSON
// line, and exits after COUNT results. With KEEP "keep", a completed subscription prints
// {"complete": true} and leaves the connection open until the server closes it.
//
//   node live.mjs WS_URL TOKEN CONNECTOR COUNT [KEEP]      (TOKEN "-": none)
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const [url, token, connector, count, keep] = process.argv.slice(2);
const print = (value) => process.stdout.write(JSON.stringify(value) + "\n");

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  lazy: false,
  retryAttempts: 0,
  connectionParams: token === "-" ? {} : { Authorization: `Bearer ${token}` },
  on: { closed: (event) => print({ closed: event.code, reason: event.reason }) },
});

let seen = 0;
client.subscribe(
  process.env.LIVE_QUERY
    ? { query: process.env.LIVE_QUERY, variables: JSON.parse(process.env.LIVE_VARIABLES ?? "{}") }
    : {
        query:
          "subscription Work($connector: String) { workAvailable(connectorName: $connector) { connectorName at } }",
        variables: { connector },
      },
  {
    next: (value) => {
      print(value);
      seen += 1;
      if (seen >= Number(count)) client.dispose();
    },
    error: (error) => {
      print({ error: Array.isArray(error) ? error : String(error.code ?? error) });
      client.dispose();
    },
    complete: () => {
      if (keep === "keep") print({ complete: true });
      else client.dispose();
    },
  },
);
