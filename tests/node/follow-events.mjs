// followEvents for graphql-ws: operationEvents without gaps across reconnects. graphql-ws's
// own retry must stay off (retryAttempts: 0): it resubscribes with the variables it started
// with, so every event committed while the socket was down would be skipped. Here each new
// connection resubscribes with the last `sequence` seen as `after`, and the server replays
// what followed. A GraphQL error ends the follow: EVENTS_COLLECTED (after is older than the
// oldest event kept) means the caller must read the state afresh.
//
// Driven by tests/e2e/test_client_sdk.py: prints each event as one JSON line until stopped
// (or the error, then exits 1).
//
//   node follow-events.mjs WS_URL TOKEN CONNECTOR
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const EVENTS = `subscription OperationEvents($filter: OperationFilter, $after: String) {
  operationEvents(filter: $filter, after: $after) {
    sequence action operation { callerDID operationID }
  }
}`;

export function followEvents({ url, token, filter, after = null, onEvent, onError, retryMs = 200 }) {
  let last = after;
  let stopped = false;
  let client = null;
  const connect = () => {
    let ended = false;
    const again = () => {
      if (ended) return;
      ended = true;
      client.dispose();
      if (!stopped) setTimeout(connect, retryMs);
    };
    client = createClient({
      url,
      webSocketImpl: WebSocket,
      lazy: false,
      retryAttempts: 0,
      connectionParams: { Authorization: `Bearer ${token}` },
      on: { closed: again },
    });
    client.subscribe(
      { query: EVENTS, variables: { filter, after: last } },
      {
        next: (result) => {
          if (result.errors) {
            stopped = true;
            onError(result.errors);
            return;
          }
          const event = result.data.operationEvents;
          last = event.sequence;
          onEvent(event);
        },
        error: (error) => {
          if (Array.isArray(error)) {
            stopped = true;
            onError(error);
          } else {
            again();
          }
        },
        complete: again,
      },
    );
  };
  connect();
  return () => {
    stopped = true;
    client?.dispose();
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [url, token, connector] = process.argv.slice(2);
  const print = (value) => process.stdout.write(JSON.stringify(value) + "\n");
  followEvents({
    url,
    token,
    filter: { connectorName: connector },
    onEvent: (event) => print({ operationID: event.operation.operationID }),
    onError: (errors) => {
      print({ errors });
      process.exit(1);
    },
  });
}
