// GraphiQL at /graphql, signed in as the dashboard is (/signin/session.js): by a sign-in
// link's code (/graphql#sign-in=<code>), its session's token kept in this tab and renewed
// while the page is open. Each request carries the tab's token; an Authorization set in the
// Headers tab takes its place (and its refusal leaves the tab's token be). A subscription
// (operationEvents, workAvailable, …) runs over graphql-transport-ws on /graphql, the token
// in connection_init's payload; each event shows as it comes, until the stream ends or the
// run is stopped.
import { forget, signInFromAddress, signOut, signedIn, token } from "/signin/session.js";

const bar = document.getElementById("session");

function show(error) {
  bar.replaceChildren();
  const who = signedIn();
  if (error) {
    const text = document.createElement("span");
    text.className = "error";
    text.setAttribute("role", "alert");
    text.textContent = `${error} `;
    bar.append(text);
  }
  if (who) {
    bar.append(`Signed in${who.sub ? ` as ${who.sub}` : ""}${who.session ? "" : " (a token typed in)"}.`);
    const out = document.createElement("button");
    out.type = "button";
    out.textContent = "Sign out";
    out.addEventListener("click", () => signOut().then(() => show(null)));
    bar.append(out);
  } else {
    bar.append(
      "Not signed in: open a sign-in link (connector-store sign-in-link --page graphiql prints one), " +
        'or set "Authorization": "Bearer <token>" in the Headers tab.',
    );
  }
}

function isSubscription(params, options) {
  const parsed = options?.documentAST;
  if (!parsed || parsed.loc?.source?.body !== params.query) {
    // GraphiQL parsed another text than the one it sends (or none yet): the sent text's
    // operation keyword decides.
    const text = (params.query || "").replace(/#[^\n]*/g, "");
    const named = params.operationName && new RegExp(`\\b(query|mutation|subscription)\\s+${params.operationName}\\b`).exec(text);
    return named ? named[1] === "subscription" : /^\s*subscription\b/.test(text);
  }
  const operations = parsed.definitions.filter((definition) => definition.kind === "OperationDefinition");
  const chosen = params.operationName
    ? operations.find((operation) => operation.name?.value === params.operationName)
    : operations[0];
  return chosen?.operation === "subscription";
}

// One subscription over graphql-transport-ws: an async iterable of its results (GraphiQL
// shows each), ended by the server's `complete`, an `error`, a close, or GraphiQL's stop.
function subscribe(params, authorization) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/graphql`, "graphql-transport-ws");
  const queue = [];
  let wake = null;
  const push = (item) => {
    queue.push(item);
    if (wake) {
      wake();
      wake = null;
    }
  };
  const send = (message) => socket.readyState === WebSocket.OPEN && socket.send(JSON.stringify(message));
  socket.onopen = () =>
    send({ type: "connection_init", payload: authorization ? { Authorization: authorization } : {} });
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.type === "connection_ack") send({ id: "1", type: "subscribe", payload: params });
    else if (message.type === "ping") send({ type: "pong" });
    else if (message.type === "next") push({ value: message.payload });
    else if (message.type === "error") push({ value: { errors: message.payload } });
    if (message.type === "error" || message.type === "complete") push({ last: true });
  };
  socket.onclose = (event) => {
    if (event.code !== 1000) {
      const why = event.reason || "the connection closed";
      push({ value: { errors: [{ message: `${why} (${event.code})` }] } });
    }
    push({ last: true });
  };
  const close = () => {
    send({ id: "1", type: "complete" });
    socket.close(1000);
    return Promise.resolve({ done: true, value: undefined });
  };
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    async next() {
      while (!queue.length) await new Promise((resolve) => (wake = resolve));
      const item = queue.shift();
      return item.last ? close() : { done: false, value: item.value };
    },
    return: close,
  };
}

async function fetcher(params, options) {
  const current = token();
  const headers = current ? { Authorization: `Bearer ${current}` } : {};
  // An Authorization the Headers tab set, as [name, value], or undefined.
  const typed = Object.entries(options?.headers || {}).find(([name]) => name.toLowerCase() === "authorization");
  if (isSubscription(params, options)) {
    return subscribe(params, typed ? typed[1] : headers.Authorization);
  }
  const result = await GraphiQL.createFetcher({ url: "/graphql", headers })(params, options);
  if (!typed && current && result?.errors?.[0]?.extensions?.code === "UNAUTHENTICATED" && token() === current) {
    forget(result.errors[0].message);
  }
  return result;
}

addEventListener("signed-out", (event) => show(event.reason));
addEventListener("session-changed", () => show(null));
show(null);
signInFromAddress().then(
  () => show(null),
  (error) => show(error.message),
);

ReactDOM.createRoot(document.getElementById("graphiql")).render(
  React.createElement(GraphiQL, {
    fetcher,
    defaultEditorToolsVisibility: true,
    headerEditorEnabled: true,
    defaultQuery:
      "{\n  serverTime\n  operations(first: 10) {\n    edges { node { callerDID operationID state attempts } }\n  }\n}\n",
  }),
);
