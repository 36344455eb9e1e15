// GraphiQL at /graphql, signed in as the dashboard is (/signin/session.js): by a sign-in
// link's code (/graphql#sign-in=<code>), its session's token kept in this tab and renewed
// while the page is open. Each request carries the tab's token; an Authorization set in the
// Headers tab takes its place (and its refusal leaves the tab's token be).
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

async function fetcher(params, options) {
  const current = token();
  const headers = current ? { Authorization: `Bearer ${current}` } : {};
  const result = await GraphiQL.createFetcher({ url: "/graphql", headers })(params, options);
  const typed = Object.keys(options?.headers || {}).some((name) => name.toLowerCase() === "authorization");
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
