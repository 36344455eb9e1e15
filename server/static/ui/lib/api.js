// The dashboard's GraphQL client: the named operations of dashboard.graphql, run with the
// tab's token (/signin/session.js).
import { useEffect, useState } from "/ui/assets/htm-preact-standalone.module.js";
import { forget, token as storedToken } from "/signin/session.js";

// --- the token -----------------------------------------------------------------------------

// The token is the tab's (/signin/session.js): a sign-in link's session, renewed while the
// page is open, or a token typed in. No page of the server ever holds one.

export class SignedOut extends Error {}

/** A refused or missing token: forgotten, and the page shows the sign-in box (with
 * ``reason``). */
export function signedOut(reason) {
  forget(reason);
  return new SignedOut(reason || "");
}

// --- the documents -------------------------------------------------------------------------

export const DEFINITION = /^(query|mutation|subscription|fragment)\s+(\w+)/;

/** Each named operation of a document, with the fragments it spreads (transitively). */
export function operationsOf(text) {
  const parts = text.split(/^(?=(?:query|mutation|subscription|fragment)\s)/m);
  const operations = new Map();
  const fragments = new Map();
  for (const part of parts) {
    const match = part.match(DEFINITION);
    if (match) (match[1] === "fragment" ? fragments : operations).set(match[2], part);
  }
  const complete = new Map();
  for (const [name, body] of operations) {
    const used = new Set();
    const queue = [body];
    while (queue.length) {
      for (const spread of queue.pop().matchAll(/\.\.\.\s*(\w+)/g)) {
        if (fragments.has(spread[1]) && !used.has(spread[1])) {
          used.add(spread[1]);
          queue.push(fragments.get(spread[1]));
        }
      }
    }
    complete.set(name, [body, ...[...used].map((f) => fragments.get(f))].join("\n"));
  }
  return complete;
}

export let documents = null;

export async function loadDocuments() {
  if (documents === null) {
    const response = await fetch("/ui/dashboard.graphql");
    if (!response.ok) throw new Error(`/ui/dashboard.graphql: HTTP ${response.status}`);
    documents = operationsOf(await response.text());
  }
  return documents;
}

/** Run the named operation of dashboard.graphql; resolve its data, reject with its errors. */
export async function run(name, variables = {}) {
  const query = (await loadDocuments()).get(name);
  if (!query) throw new Error(`dashboard.graphql has no operation ${name}`);
  const token = storedToken();
  if (!token) throw signedOut(null);
  const response = await fetch("/graphql", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables, operationName: name }),
  });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) {
    throw signedOut(body.errors?.[0]?.message || "the token was refused");
  }
  if (body.errors?.length) {
    const error = new Error(body.errors.map((e) => e.message).join("; "));
    error.data = body.data;
    throw error;
  }
  return body.data;
}

/** The data of ``name`` for ``variables``, re-run when ``key`` changes or ``reload()`` is
 * called: [data, error, reload]. What is shown is only ever the answer for the current ``key``
 * (a new key shows nothing until its own answer, never a frame of the old key's data); a reload
 * keeps it until the answer replaces it (a live view does not blink on each event). */
export function useQuery(name, variables, key) {
  const [state, setState] = useState({ key, data: null, error: null });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let current = true;
    run(name, variables).then(
      (data) => current && setState({ key, data, error: null }),
      (error) => current && setState({ key, data: null, error }),
    );
    return () => {
      current = false;
    };
  }, [key, round]);
  const reload = () => setRound((n) => n + 1);
  return state.key === key ? [state.data, state.error, reload] : [null, null, reload];
}
