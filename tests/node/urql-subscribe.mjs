// urql's own HTTP subscriptions (fetchSubscriptions: true), with the Accept header urql sends
// as it is: operationEvents over multipart HTTP, no WebSocket.
//
// Driven by tests/e2e/test_client_tools.py: prints each event's operationID as one JSON line
// until COUNT have arrived (or the error, then exits 1).
//
//   node urql-subscribe.mjs HTTP_URL TOKEN CONNECTOR COUNT
import { Client, fetchExchange } from "@urql/core";

const [url, token, connectorName, count] = process.argv.slice(2);

const EVENTS = `subscription OperationEvents($filter: OperationFilter) {
  operationEvents(filter: $filter) { sequence operation { operationID } }
}`;

const client = new Client({
  url,
  exchanges: [fetchExchange],
  fetchSubscriptions: true,
  fetchOptions: { headers: { Authorization: `Bearer ${token}` } },
});

let seen = 0;
const { unsubscribe } = client
  .subscription(EVENTS, { filter: { connectorName } })
  .subscribe((result) => {
    if (result.error) {
      console.error(JSON.stringify(result.error));
      process.exit(1);
    }
    if (!result.data) return;
    console.log(JSON.stringify({ operationID: result.data.operationEvents.operation.operationID }));
    seen += 1;
    if (seen >= Number(count)) {
      unsubscribe();
      process.exit(0);
    }
  });
