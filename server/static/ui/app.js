// The dashboard at /ui: a GraphQL client like any other. Every document it sends is a named
// operation of graphql/operations/dashboard.graphql, loaded from the server; every request
// carries the user's token. No build step: Preact and htm from one vendored ES module, and
// graphql-ws (the client of graphql-transport-ws) for the subscriptions that keep a view live.
import {
  createContext,
  html,
  render,
  useContext,
  useEffect,
  useRef,
  useState,
} from "/ui/assets/htm-preact-standalone.module.js";
// graphql-ws's browser build (UMD): run as a module it defines ``globalThis.graphqlWs``.
import "/ui/assets/graphql-ws.min.js";
import {
  exchange,
  forget,
  linkCode,
  signInFromAddress,
  signOut,
  token as storedToken,
  useToken,
} from "/signin/session.js";

const PAGE_SIZE = 50;
const STATES = ["ATTEMPTED", "COMMITTED", "FAILED", "SUPERSEDED"];
const STATUSES = ["PENDING_VERIFICATION", "VERIFIED", "REPAIR_FAILED"];

// --- the token -----------------------------------------------------------------------------

// The token is the tab's (/signin/session.js): a sign-in link's session, renewed while the
// page is open, or a token typed in. No page of the server ever holds one.

class SignedOut extends Error {}

/** A refused or missing token: forgotten, and the page shows the sign-in box (with
 * ``reason``). */
function signedOut(reason) {
  forget(reason);
  return new SignedOut(reason || "");
}

// --- the documents -------------------------------------------------------------------------

const DEFINITION = /^(query|mutation|subscription|fragment)\s+(\w+)/;

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

let documents = null;

async function loadDocuments() {
  if (documents === null) {
    const response = await fetch("/ui/dashboard.graphql");
    if (!response.ok) throw new Error(`/ui/dashboard.graphql: HTTP ${response.status}`);
    documents = operationsOf(await response.text());
  }
  return documents;
}

/** Run the named operation of dashboard.graphql; resolve its data, reject with its errors. */
async function run(name, variables = {}) {
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
 * called: [data, error, reload]. A new ``key`` clears what is shown; a reload keeps it until
 * the answer replaces it (a live view does not blink on each event). */
function useQuery(name, variables, key) {
  const [state, setState] = useState({ data: null, error: null });
  const [round, setRound] = useState(0);
  const shownKey = useRef(key);
  useEffect(() => {
    let current = true;
    if (shownKey.current !== key) {
      shownKey.current = key;
      setState({ data: null, error: null });
    }
    run(name, variables).then(
      (data) => current && setState({ data, error: null }),
      (error) => current && setState({ data: null, error }),
    );
    return () => {
      current = false;
    };
  }, [key, round]);
  return [state.data, state.error, () => setRound((n) => n + 1)];
}

// --- live updates --------------------------------------------------------------------------

const REFRESH_MS = 400;
const RETRY_MS = [500, 1000, 2000, 5000, 10000];

/** The page's one graphql-transport-ws client (for the token in use), and the state the live
 * indicator shows: "connecting", "live", "reconnecting" or "stopped" (``liveReason`` says
 * why); null while nothing subscribes. */
let socket = null;
let liveState = null;
let liveReason = "";
const liveListeners = new Set();
let subscribers = 0;

function setLive(state, reason = "") {
  liveState = state;
  liveReason = reason;
  for (const listener of liveListeners) listener(state);
}

/** Close the page's WebSocket (signed out: its token must not stay connected). */
function closeLive() {
  socket?.client.dispose();
  socket = null;
}

function liveClient() {
  const token = storedToken();
  if (socket?.token !== token) {
    socket?.client.dispose();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const client = globalThis.graphqlWs.createClient({
      url: `${scheme}://${location.host}/graphql`,
      connectionParams: { Authorization: `Bearer ${token}` },
      // Each subscription reconnects itself (``subscribeLive``), resuming after the last
      // event it saw; the client's own retry would resend the first ``after``.
      retryAttempts: 0,
      lazyCloseTimeout: 2000,
    });
    const mine = { token, client, connected: false };
    client.on("connected", () => {
      mine.connected = true;
      if (socket === mine && subscribers > 0) setLive("live");
    });
    client.on("closed", () => {
      mine.connected = false;
      if (socket === mine && subscribers > 0 && liveState === "live") setLive("reconnecting");
    });
    socket = mine;
  }
  return socket.client;
}

function codesOf(error) {
  return Array.isArray(error) ? error.map((e) => e.extensions?.code) : [];
}

/**
 * Subscribe to the named subscription of dashboard.graphql, calling ``onEvent(event)`` for
 * each event, until the returned function is called. When the connection drops (or the
 * server has too many subscriptions) it reconnects, backing off, with ``after`` = the last
 * event's sequence, so the server replays what it missed; when that is older than the log
 * keeps (EVENTS_COLLECTED) it starts again at the log's end and calls ``onGap()`` (the
 * caller re-fetches). Any other error (FORBIDDEN, UNAUTHENTICATED) ends it: the indicator
 * says "not live" and why.
 */
function subscribeLive(name, field, variables, onEvent, onGap) {
  let after = null;
  let stop = () => {};
  let timer = null;
  let failures = 0;
  let ended = false;
  const start = async () => {
    const query = (await loadDocuments()).get(name);
    if (ended || !storedToken()) return;
    let settled = false;
    const handlers = {
        next: (message) => {
          if (message.errors?.length) {
            settled = true;
            handlers.error(message.errors);
            return;
          }
          const event = message.data?.[field];
          if (!event) return;
          failures = 0;
          after = event.sequence;
          onEvent(event);
        },
        error: (error) => {
          if (ended) return;
          const codes = codesOf(error);
          if (codes.includes("EVENTS_COLLECTED")) {
            after = null;
            onGap();
            start();
            return;
          }
          if (codes.includes("UNAUTHENTICATED") && storedToken() && socket?.token !== storedToken()) {
            // The connection's token expired after the session was renewed: go on with
            // the new one, from the last event seen.
            start();
            return;
          }
          if (Array.isArray(error) && !codes.includes("TOO_MANY_SUBSCRIPTIONS")) {
            setLive("stopped", error.map((e) => e.message).join("; "));
            return;
          }
          setLive("reconnecting");
          timer = setTimeout(start, RETRY_MS[Math.min(failures, RETRY_MS.length - 1)]);
          failures += 1;
        },
        // The server ended the stream (after an error it sent, or on its own): the page
        // stops saying "live" until it is subscribed again.
        complete: () => {
          if (!ended && !settled) setLive("stopped", "the server ended the stream");
        },
    };
    stop = liveClient().subscribe(
      { query, operationName: name, variables: { ...variables, after } },
      handlers,
    );
  };
  subscribers += 1;
  if (liveState === null) setLive(socket?.connected && socket.token === storedToken() ? "live" : "connecting");
  start();
  return () => {
    ended = true;
    clearTimeout(timer);
    stop();
    subscribers -= 1;
    if (subscribers === 0) setLive(null);
  };
}

/** ``fn`` run at most once per ``ms``: a call within ``ms`` of the last run is deferred to
 * its end, and calls meanwhile fold into that one run. */
function throttle(fn, ms) {
  let last = 0;
  let timer = null;
  const throttled = () => {
    if (timer !== null) return;
    timer = setTimeout(() => {
      timer = null;
      last = Date.now();
      fn();
    }, Math.max(0, last + ms - Date.now()));
  };
  throttled.cancel = () => clearTimeout(timer);
  return throttled;
}

/**
 * Keep a view live: while it is shown, subscribe to each ``[document, field, variables]`` of
 * ``feeds`` and call ``refresh()`` after events (at most once per ``REFRESH_MS``), and once
 * the connection is up (what was written before the subscription started). ``key`` names
 * the feeds: new feeds when it changes.
 */
function useLive(feeds, refresh, key) {
  const latest = useRef(refresh);
  latest.current = refresh;
  useEffect(() => {
    if (!feeds.length) return;
    const refreshSoon = throttle(() => latest.current(), REFRESH_MS);
    const stops = feeds.map(([document, field, variables]) =>
      subscribeLive(document, field, variables, refreshSoon, refreshSoon),
    );
    const up = (state) => state === "live" && refreshSoon();
    liveListeners.add(up);
    return () => {
      liveListeners.delete(up);
      refreshSoon.cancel();
      for (const stop of stops) stop();
    };
  }, [key]);
}

const REFRESH_EVERY_MS = 10_000;

/**
 * Re-read what no event announces (pauses, caps and throttles, set in another tab or
 * through the API): ``refresh()`` when the page regains the focus or becomes visible, and
 * every ``REFRESH_EVERY_MS`` while it is shown.
 */
function useRefresh(refresh) {
  const latest = useRef(refresh);
  latest.current = refresh;
  useEffect(() => {
    const again = () => document.visibilityState === "visible" && latest.current();
    const timer = setInterval(again, REFRESH_EVERY_MS);
    addEventListener("focus", again);
    document.addEventListener("visibilitychange", again);
    return () => {
      clearInterval(timer);
      removeEventListener("focus", again);
      document.removeEventListener("visibilitychange", again);
    };
  }, []);
}

const OPERATION_EVENTS = "DashboardOperationEvents";
const WATCH_EVENTS = "DashboardWatchEvents";

function operationEvents(filter = null) {
  return [OPERATION_EVENTS, "operationEvents", { filter }];
}

function watchEvents(filter = null) {
  return [WATCH_EVENTS, "watchEvents", { filter }];
}

/** The live indicator: whether the page's subscriptions are connected. */
function LiveIndicator() {
  const [state, setState] = useState(liveState);
  useEffect(() => {
    liveListeners.add(setState);
    setState(liveState);
    return () => liveListeners.delete(setState);
  }, []);
  if (state === null) return null;
  const text = {
    connecting: "connecting…",
    live: "live",
    reconnecting: "reconnecting…",
    stopped: "not live",
  }[state];
  const title = {
    connecting: "Connecting to the server's subscriptions",
    live: "Updates as the server writes: no reload needed",
    reconnecting: "The connection dropped: reconnecting, then catching up on what was missed",
    stopped: `The server ended the updates (${liveReason}): reload to try again`,
  }[state];
  return html`<span id="live" class=${`live live-${state}`} data-live=${state} title=${title}
    aria-live="polite">${text}</span
  >`;
}

// --- what the token may do -----------------------------------------------------------------

/** The viewer (``viewer { did scopes mutations }``); an action is shown only when its
 * mutation is in ``mutations``. Empty until it has loaded: no button before the answer. */
const ViewerContext = createContext({ did: null, scopes: [], mutations: [] });

/** Tells the page what an action did (``{ text }``) or why it failed (``{ error }``): shown
 * in the page's status line, which outlives the view's reload after the action. */
const NoticeContext = createContext(() => {});

function useViewer() {
  return useContext(ViewerContext);
}

function readsAll(viewer) {
  return viewer.scopes.includes("observer");
}

/**
 * A button running one operator mutation, shown only when the token may use it. It asks
 * first when it touches more than one row (``rows`` above 1) or when ``count`` is given (an
 * async function answering the exact number of rows it would touch now, from the API), or
 * when ``risk`` says what a single row risks; the confirmation takes the focus, and Escape
 * or Back leaves it. Then it says what it did (``done(data)``, in the page's status line)
 * and calls ``after()``; when ``remainingOf(data)`` is above 0 it offers to go on.
 */
function Action({ field, document, input, label, rows = 1, count, risk, done, remainingOf, after = () => {} }) {
  const viewer = useViewer();
  const notice = useContext(NoticeContext);
  const [stage, setStage] = useState("idle");
  const [touches, setTouches] = useState(null);
  const group = useRef(null);
  const opener = useRef(null);
  useEffect(() => {
    if (stage === "confirm") group.current?.querySelector("button:not([disabled])")?.focus();
  }, [stage]);
  if (!viewer.mutations.includes(field)) return null;
  const leave = () => {
    setStage("idle");
    requestAnimationFrame(() => opener.current?.focus());
  };
  const ask = (n) => {
    setTouches(n);
    setStage("confirm");
  };
  const go = () => {
    setStage("running");
    run(document, { input }).then(
      (data) => {
        notice({ text: done(data) });
        after();
        const remaining = remainingOf ? remainingOf(data) : 0;
        if (remaining > 0) ask(remaining);
        else leave();
      },
      (error) => {
        leave();
        notice({ error });
      },
    );
  };
  const open = () => {
    notice(null);
    if (count) {
      setStage("counting");
      count().then(ask, (error) => {
        leave();
        notice({ error });
      });
    } else if (rows === 1 && !risk) go();
    else ask(rows);
  };
  return html`<span class="action-group">
    ${stage === "confirm"
      ? html`<span
          role="group"
          aria-label=${`Confirm: ${label}`}
          class="confirm"
          ref=${group}
          onKeyDown=${(e) => e.key === "Escape" && leave()}
        >
          ${label}: this touches ${plural(touches, "row")}.${" "}
          ${risk && html`<strong class="risk">${risk}</strong>${" "}`}
          <button type="button" class="action" onClick=${go} disabled=${touches === 0}>Confirm</button>${" "}
          <button type="button" onClick=${leave}>Back</button>
        </span>`
      : html`<button
          type="button"
          class="action"
          ref=${opener}
          disabled=${stage === "running" || stage === "counting"}
          onClick=${open}
        >
          ${label}
        </button>`}
  </span>`;
}

function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/** What a bulk action left (its ``remaining``): nothing, or how many still match (its
 * confirmation stays open to go on). */
function left(remaining) {
  return remaining === 0 ? "" : ` ${remaining} still match: confirm to go on.`;
}

/** The exact number of rows each bulk action would touch now, from the API. */
const countCancellable = (filter) => () =>
  run("DashboardCountCancellable", { filter }).then((d) => d.cancellableCount);
const countReissuable = (filter) => () =>
  run("DashboardCountReissuable", { filter }).then((d) => d.reissuableCount.remaining);
const countRearmable = (filter) => () =>
  run("DashboardCountRearmable", { filter }).then((d) => d.rearmableCount);

/** A reissue's answer in a sentence: what it made, what it skipped and why (its
 * ``skipped``), and what is left (``remaining``). */
function reissued(answer) {
  const made = answer.operations;
  const skipped = [
    [answer.skipped.cancelled, "cancelled"],
    [answer.skipped.outcomeUnknown, "with an unknown outcome (the provider may hold the write)"],
    [answer.skipped.blocked, "blocked (the reissue key is taken)"],
  ].filter(([n]) => n > 0);
  const said = made.length === 1
    ? `Reissued as ${made[0].operationID}.`
    : `Reissued ${plural(made.length, "operation")}.`;
  const not = skipped.length
    ? ` Not reissued: ${skipped.map(([n, why]) => `${n} ${why}`).join(", ")}.`
    : "";
  return said + not + left(answer.remaining);
}

// --- routes --------------------------------------------------------------------------------

const VIEWS = [
  ["overview", "Overview"],
  ["operations", "Operations"],
  ["failures", "Failures"],
  ["accounts", "Accounts"],
];

function currentRoute() {
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  return { view: path || "overview", params: new URLSearchParams(query || "") };
}

function link(view, params = {}) {
  const query = new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ""),
  ).toString();
  return `#/${view}${query ? `?${query}` : ""}`;
}

// --- formatting ----------------------------------------------------------------------------

function time(ms) {
  if (ms === null || ms === undefined) return "";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function Time({ ms }) {
  return ms === null || ms === undefined
    ? html`<span class="note">—</span>`
    : html`<time datetime=${new Date(ms).toISOString()}>${time(ms)}</time>`;
}

function Num({ value, label }) {
  return html`<td class=${value ? "num" : "num zero"} data-count=${label}>${value}</td>`;
}

function Failure({ error }) {
  if (!error) return null;
  return html`<p class="error" role="alert">${error.message}</p>`;
}

function operationLink(op) {
  return link("operation", { caller: op.callerDID, id: op.operationID });
}

/** The page of a watch: its identity (owner, connector, model, account, source). */
function watchLink(w) {
  return link("watch", {
    owner: w.ownerDID,
    connector: w.connectorName,
    model: w.model,
    account: w.accountKey,
    source: w.sourceID,
  });
}

// --- views ---------------------------------------------------------------------------------

function Overview() {
  const viewer = useViewer();
  const [data, error, reloadCounts] = useQuery("DashboardOverview", {}, "overview");
  const [paused, setPaused] = useState(null);
  const [round, setRound] = useState(0);
  const reload = () => {
    reloadCounts();
    setRound((n) => n + 1);
  };
  useLive([operationEvents(), watchEvents()], reload, "overview");
  useRefresh(reload);
  useEffect(() => {
    if (!readsAll(viewer)) return;
    allAccounts().then(
      ({ accounts, connectors }) =>
        setPaused([
          ...connectors
            .filter((c) => c.pausedAt !== null && !accounts.some((a) => a.connectorName === c.connectorName))
            .map((c) => ({ connectorName: c.connectorName, accountKey: "(every account)", pausedAt: c.pausedAt })),
          ...accounts.filter((a) => a.paused),
        ]),
      () => setPaused(null),
    );
  }, [viewer, round]);
  if (error) return html`<${Failure} error=${error} />`;
  if (!data) return html`<p aria-busy="true">Counting…</p>`;
  const accounts = new Map();
  for (const c of data.operationCounts) {
    const key = `${c.connectorName}\u0000${c.accountKey}`;
    const row = accounts.get(key) || {
      connectorName: c.connectorName,
      accountKey: c.accountKey,
      due: 0,
      inFlight: 0,
      total: 0,
      ...Object.fromEntries(STATES.map((s) => [s, 0])),
    };
    row[c.state] += c.count;
    row.due += c.due;
    row.inFlight += c.inFlight;
    row.total += c.count;
    accounts.set(key, row);
  }
  const watchRows = new Map();
  for (const w of data.watchCounts) {
    const row = watchRows.get(w.connectorName) || Object.fromEntries(STATUSES.map((s) => [s, 0]));
    row[w.status] += w.count;
    watchRows.set(w.connectorName, row);
  }
  return html`
    <h2>Overview</h2>
    <p class="note">Exact counts at <${Time} ms=${data.serverTime} /> (server time).</p>
    <table id="operation-counts">
      <caption>Operations by connector and account</caption>
      <thead>
        <tr>
          <th scope="col">Connector</th>
          <th scope="col">Account</th>
          <th scope="col" class="num">Due</th>
          <th scope="col" class="num">In flight</th>
          ${STATES.map((s) => html`<th scope="col" class="num">${s}</th>`)}
          <th scope="col" class="num">Total</th>
        </tr>
      </thead>
      <tbody>
        ${accounts.size === 0 &&
        html`<tr><td colspan=${STATES.length + 5}>No operations.</td></tr>`}
        ${[...accounts.values()].map((row) => {
          const at = `${row.connectorName}/${row.accountKey}`;
          return html`<tr>
            <th scope="row">${row.connectorName}</th>
            <td>${row.accountKey}</td>
            <${Num} value=${row.due} label=${`${at}/due`} />
            <${Num} value=${row.inFlight} label=${`${at}/inFlight`} />
            ${STATES.map(
              (s) => html`<td class=${row[s] ? "num" : "num zero"} data-count=${`${at}/${s}`}>
                ${row[s]
                  ? html`<a
                      href=${link("operations", {
                        state: s,
                        connector: row.connectorName,
                        account: row.accountKey,
                      })}
                      >${row[s]}</a
                    >`
                  : 0}
              </td>`,
            )}
            <${Num} value=${row.total} label=${`${at}/total`} />
          </tr>`;
        })}
      </tbody>
    </table>
    ${paused &&
    html`<section aria-labelledby="paused-heading">
      <h3 id="paused-heading">Paused accounts</h3>
      ${paused.length === 0
        ? html`<p id="paused-accounts">None: every account is leased as usual.</p>`
        : html`<ul id="paused-accounts">
            ${paused.map(
              (a) => html`<li data-paused=${`${a.connectorName}/${a.accountKey}`}>
                ${a.connectorName} / ${a.accountKey}
                ${a.pausedAt !== null
                  ? html` since <${Time} ms=${a.pausedAt} />`
                  : " (its connector is paused)"}
              </li>`,
            )}
          </ul>`}
    </section>`}
    <table id="watch-counts">
      <caption>Watches by connector and status</caption>
      <thead>
        <tr>
          <th scope="col">Connector</th>
          ${STATUSES.map((s) => html`<th scope="col" class="num">${s}</th>`)}
        </tr>
      </thead>
      <tbody>
        ${watchRows.size === 0 && html`<tr><td colspan=${STATUSES.length + 1}>No watches.</td></tr>`}
        ${[...watchRows.entries()].map(
          ([connector, row]) => html`<tr>
            <th scope="row">${connector}</th>
            ${STATUSES.map((s) => html`<${Num} value=${row[s]} label=${`${connector}/${s}`} />`)}
          </tr>`,
        )}
      </tbody>
    </table>
  `;
}

const FILTER_FIELDS = [
  "state", "connector", "account", "owner", "caller", "party", "document", "kind", "after_time",
  "before_time",
];

/** Epoch ms of a date-time input's value (``YYYY-MM-DDTHH:MM[:SS]``) read in UTC, the time
 * zone every time on the page is shown in. */
function utc(value) {
  return new Date(`${value}Z`).getTime();
}

/** The ``OperationFilter`` the view's parameters name (times: date-time inputs in UTC). */
function filterOf(params) {
  const filter = {};
  const given = (name) => params.get(name) || null;
  if (given("state")) filter.states = [given("state")];
  if (given("connector")) filter.connectorName = given("connector");
  if (given("account")) filter.accountKey = given("account");
  if (given("owner")) filter.ownerDID = given("owner");
  if (given("caller")) filter.callerDID = given("caller");
  if (given("party")) filter.visibleTo = given("party");
  if (given("document")) filter.documentIDs = [given("document")];
  if (given("kind")) filter.kind = given("kind");
  if (given("after_time")) filter.updatedAfter = utc(given("after_time"));
  if (given("before_time")) filter.updatedBefore = utc(given("before_time"));
  return filter;
}

/** What may change whether an operation is listed under ``filter``: the events of the
 * operations of its fixed fields (an event's ``toState`` is what a filter's ``states`` match,
 * so an operation leaving the state shown would go unheard; a subscription refuses
 * ``documentIDs`` and the times). */
function liveFilter(filter) {
  const { states, kind, updatedAfter, updatedBefore, documentIDs, ...fixed } = filter;
  return Object.keys(fixed).length ? fixed : null;
}

/** The filter narrowed to ``state``, or null when it names another state. */
function inState(filter, state) {
  if (filter.states && !filter.states.includes(state)) return null;
  return { ...filter, states: [state] };
}

function Operations({ params }) {
  const after = params.get("after") || null;
  const filter = filterOf(params);
  const [data, error, reload] = useQuery(
    "DashboardOperations",
    { filter, first: PAGE_SIZE, after },
    params.toString(),
  );
  useLive([operationEvents(liveFilter(filter))], reload, params.toString());
  const form = Object.fromEntries(FILTER_FIELDS.map((n) => [n, params.get(n) || ""]));
  const submit = (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(event.target).entries());
    location.hash = link("operations", values);
  };
  const rows = data ? data.operations.edges.map((e) => e.node) : [];
  const live = Object.keys(filter).length ? inState(filter, "ATTEMPTED") : null;
  const failed = Object.keys(filter).length ? inState(filter, "FAILED") : null;
  // The filter form is the user's until Apply: uncontrolled fields (defaultValue, selected),
  // so a live re-render keeps what is being typed; a new route remounts it (its key).
  return html`
    <h2>Operations</h2>
    <form key=${params.toString()} class="filters" onSubmit=${submit} aria-label="Filter operations">
      <label
        >State
        <select name="state">
          <option value="">any</option>
          ${STATES.map((s) => html`<option value=${s} selected=${s === form.state}>${s}</option>`)}
        </select>
      </label>
      <label>Connector <input name="connector" defaultValue=${form.connector} /></label>
      <label>Account <input name="account" defaultValue=${form.account} /></label>
      <label>Owner DID <input name="owner" defaultValue=${form.owner} /></label>
      <label>Caller DID <input name="caller" defaultValue=${form.caller} /></label>
      <label>Caller or owner DID <input name="party" defaultValue=${form.party} /></label>
      <label>Document ID <input name="document" defaultValue=${form.document} /></label>
      <label>Last outcome kind <input name="kind" defaultValue=${form.kind} /></label>
      <label
        >Updated from (UTC)
        <input type="datetime-local" step="1" name="after_time" defaultValue=${form.after_time}
      /></label>
      <label
        >Updated before (UTC)
        <input type="datetime-local" step="1" name="before_time" defaultValue=${form.before_time}
      /></label>
      <button type="submit">Apply</button>
    </form>
    <p class="note">Oldest first (the order of claims).</p>
    ${data &&
    html`<p class="actions">
      ${live &&
      html`<${Action}
        field="cancelOperations"
        document="DashboardCancelOperations"
        label="Cancel the matching ATTEMPTED operations"
        input=${{ filter: live, reason: "cancelled from the dashboard" }}
        count=${countCancellable(live)}
        remainingOf=${(d) => d.cancelOperations.remaining}
        done=${(d) =>
          `Cancelled ${plural(d.cancelOperations.cancelled, "operation")}.` +
          left(d.cancelOperations.remaining)}
        after=${reload}
      />`}
      ${failed &&
      html`<${Action}
        field="reissueOperations"
        document="DashboardReissueOperations"
        label="Reissue the matching FAILED operations"
        input=${{ filter: failed }}
        count=${countReissuable(failed)}
        remainingOf=${(d) => d.reissueOperations.remaining}
        done=${(d) => reissued(d.reissueOperations)}
        after=${reload}
      />`}
    </p>`}
    <${Failure} error=${error} />
    ${!data && !error && html`<p aria-busy="true">Loading…</p>`}
    ${data &&
    html`<table id="operations">
        <caption>Operations${after ? " (a later page)" : ""}</caption>
        <thead>
          <tr>
            <th scope="col">Operation</th>
            <th scope="col">Caller</th>
            <th scope="col">Owner</th>
            <th scope="col">Connector</th>
            <th scope="col">Account</th>
            <th scope="col">State</th>
            <th scope="col" class="num">Attempts</th>
            <th scope="col">Last outcome</th>
            <th scope="col">Next attempt</th>
            <th scope="col">Updated</th>
          </tr>
        </thead>
        <tbody>
          ${rows.length === 0 && html`<tr><td colspan="10">No operations match.</td></tr>`}
          ${rows.map(
            (op) => html`<tr data-operation=${op.operationID}>
              <td><a href=${operationLink(op)}>${op.operationID}</a></td>
              <td class="mono">${op.callerDID}</td>
              <td class="mono">${op.ownerDID}</td>
              <td>${op.connectorName}</td>
              <td>${op.accountKey}</td>
              <td class=${`state-${op.state}`} data-state>${op.state}</td>
              <td class="num">${op.attempts}</td>
              <td>${[op.lastKind, op.lastHttpStatus].filter((v) => v !== null).join(" ")}</td>
              <td><${Time} ms=${op.nextAttemptAt} /></td>
              <td><${Time} ms=${op.updatedAt} /></td>
            </tr>`,
          )}
        </tbody>
      </table>
      <nav class="pager" aria-label="Pages">
        ${after && html`<a href=${link("operations", { ...form })}>First page</a>`}
        ${data.operations.pageInfo.hasNextPage &&
        html`<a href=${link("operations", { ...form, after: data.operations.pageInfo.endCursor })}
          >Next page</a
        >`}
      </nav>`}
  `;
}

function Fields({ record, names }) {
  return html`<dl class="fields">
    ${names.map(([name, kind]) => {
      const value = record[name];
      let shown = value;
      if (kind === "time") shown = html`<${Time} ms=${value} />`;
      else if (kind === "json") shown = value === null ? "null" : JSON.stringify(value);
      else if (value === null || value === undefined) shown = html`<span class="note">null</span>`;
      return html`<dt>${name}</dt><dd data-field=${name} class=${kind === "state" || kind === "status" ? `${kind}-${value}` : ""}>${shown}</dd>`;
    })}
  </dl>`;
}

const OPERATION_FIELDS = [
  ["state", "state"], ["callerDID"], ["operationID"], ["ownerDID"], ["connectorName"],
  ["accountKey"], ["model"], ["op"], ["target"], ["sourceID"], ["documentID"],
  ["attempts"], ["lastKind"], ["lastHttpStatus"], ["lastError"], ["nextAttemptAt", "time"], ["deferReason"],
  ["sendMarker"], ["leaseExpiresAt", "time"], ["version"], ["incarnation"],
  ["deterministicEventID"], ["payloadHash"], ["providerEtag"], ["reissueIntent", "json"],
  ["resultEntity", "json"], ["nodeKey"], ["createdAt", "time"], ["updatedAt", "time"],
];
const WATCH_FIELDS = [
  ["verificationStatus", "status"], ["repairGeneration"], ["verificationAttempts"],
  ["documentID"], ["observedWinnerDigest"], ["verifiedStateDigest"],
  ["nextAttemptAt", "time"], ["claimedUntil", "time"], ["deferReason"], ["lastError"],
  ["updatedAt", "time"],
];

/** The operation's event log, oldest first: one row per write. */
function History({ events }) {
  const rows = events.edges.map((e) => e.node);
  return html`<table id="operation-events">
    <caption>
      Every write, oldest first${events.pageInfo.hasNextPage ? ` (the first ${rows.length})` : ""}
    </caption>
    <thead>
      <tr>
        <th scope="col">At</th>
        <th scope="col">Action</th>
        <th scope="col">By</th>
        <th scope="col">State</th>
        <th scope="col" class="num">Attempts</th>
        <th scope="col">Outcome</th>
        <th scope="col">Message</th>
      </tr>
    </thead>
    <tbody>
      ${rows.length === 0 && html`<tr><td colspan="7">No events.</td></tr>`}
      ${rows.map(
        (e) => html`<tr data-event=${e.action}>
          <td><${Time} ms=${e.at} /></td>
          <td>${e.action}</td>
          <td class="mono">${e.actorDID ?? html`<span class="note">the server</span>`}</td>
          <td>${e.fromState ? `${e.fromState} → ${e.toState}` : e.toState}</td>
          <td class="num">${e.attempts}</td>
          <td>${[e.kind, e.httpStatus].filter((v) => v !== null).join(" ")}</td>
          <td>${e.message}</td>
        </tr>`,
      )}
    </tbody>
  </table>`;
}

/** Re-arm one REPAIR_FAILED watch: the filter names its owner, connector, model, account and
 * document (a watch filter has no source id), so it asks first when it has no document. */
function Rearm({ watch, after }) {
  const filter = {
    ownerDID: watch.ownerDID,
    connectorName: watch.connectorName,
    model: watch.model,
    accountKey: watch.accountKey,
    status: "REPAIR_FAILED",
    ...(watch.documentID === null ? {} : { documentIDs: [watch.documentID] }),
  };
  return html`<${Action}
    field="rearmWatches"
    document="DashboardRearmWatches"
    label="Re-arm"
    input=${{ filter }}
    count=${watch.documentID === null ? countRearmable(filter) : undefined}
    remainingOf=${(d) => d.rearmWatches.remaining}
    done=${(d) =>
      `Re-armed ${plural(d.rearmWatches.rearmed, "watch", "watches")}.` +
      left(d.rearmWatches.remaining)}
    after=${after}
  />`;
}

function OperationView({ params }) {
  const variables = { callerDID: params.get("caller") || "", operationID: params.get("id") || "" };
  const [data, error, reload] = useQuery("DashboardOperation", variables, params.toString());
  useLive([operationEvents(variables)], reload, params.toString());
  // Its watch's events: a subscription's filter has no source id nor document, so those of
  // the watches of its owner, connector, model and account.
  const seen = data?.operation;
  const watched = seen && {
    ownerDID: seen.ownerDID,
    connectorName: seen.connectorName,
    model: seen.model,
    accountKey: seen.accountKey,
  };
  useLive(watched ? [watchEvents(watched)] : [], reload, JSON.stringify(watched));
  if (error) return html`<${Failure} error=${error} />`;
  if (!data) return html`<p aria-busy="true">Loading…</p>`;
  const op = data.operation;
  if (!op) return html`<h2>Operation</h2><p>No operation ${variables.operationID} of ${variables.callerDID} that this token may see.</p>`;
  const key = { callerDID: op.callerDID, operationID: op.operationID };
  const watch = op.watch;
  return html`
    <h2>Operation <span class="mono">${op.operationID}</span></h2>
    <p class="actions">
      ${op.state === "ATTEMPTED" &&
      html`<${Action}
          field="cancelOperations"
          document="DashboardCancelOperations"
          label="Cancel"
          input=${{ filter: { ...key, states: ["ATTEMPTED"] }, reason: "cancelled from the dashboard" }}
          risk=${op.sendMarker !== null
            ? "Its send is marked: the provider may already hold the write, and a reissue would send it again."
            : "Its holder's run is refused from now on."}
          done=${(d) =>
            `Cancelled ${plural(d.cancelOperations.cancelled, "operation")}.` +
            left(d.cancelOperations.remaining)}
          after=${reload}
        />
        ${op.leaseExpiresAt !== null &&
        html`<${Action}
          field="forceReleaseLeases"
          document="DashboardForceReleaseLeases"
          label="Force-release the lease"
          input=${{ keys: [key] }}
          risk=${`Its holder's run is refused from now on${op.sendMarker !== null
            ? "; its marked send counts as abandoned (the provider may hold the write)" : ""}.`}
          done=${(d) =>
            d.forceReleaseLeases.released.length
              ? `Released the lease (attempts now ${d.forceReleaseLeases.released[0].attempts}).`
              : "No lease to release."}
          after=${reload}
        />`}`}
      ${op.state === "FAILED" &&
      !op.reissuedAs &&
      html`<${Action}
        field="reissueOperations"
        document="DashboardReissueOperations"
        label="Reissue"
        input=${{ filter: { ...key, states: ["FAILED"] } }}
        done=${(d) => reissued(d.reissueOperations)}
        after=${reload}
      />`}
    </p>
    ${op.reissuedFrom &&
    html`<p>Reissues <a href=${operationLink(op.reissuedFrom)}>${op.reissuedFrom.operationID}</a>.</p>`}
    ${op.lastError !== null &&
    html`<p class="error" id="last-error">Last error: ${op.lastError}</p>`}
    ${op.reissuedAs &&
    html`<p>
      Reissued as <a href=${operationLink(op.reissuedAs)}>${op.reissuedAs.operationID}</a>${" "}
      (${op.reissuedAs.state}).
    </p>`}
    <section aria-labelledby="op-fields">
      <h3 id="op-fields">Fields</h3>
      <${Fields} record=${op} names=${OPERATION_FIELDS} />
    </section>
    <section aria-labelledby="op-history">
      <h3 id="op-history">History</h3>
      <${History} events=${op.events} />
    </section>
    <section aria-labelledby="op-watch">
      <h3 id="op-watch">Its watch</h3>
      ${watch && html`<p><a id="watch-link" href=${watchLink(watch)}>The watch's page</a> (its history).</p>`}
      ${watch?.verificationStatus === "REPAIR_FAILED" &&
      html`<p class="actions"><${Rearm} watch=${watch} after=${reload} /></p>`}
      ${watch
        ? html`<${Fields} record=${watch} names=${WATCH_FIELDS} />`
        : html`<p>No watch yet (a watch is armed when the operation commits).</p>`}
    </section>
  `;
}

const WATCH_PAGE_FIELDS = [
  ["verificationStatus", "status"], ["ownerDID"], ["connectorName"], ["model"], ["accountKey"],
  ["sourceID"], ["documentID"], ["repairGeneration"], ["verificationAttempts"],
  ["observedWinnerDigest"], ["verifiedStateDigest"], ["nextAttemptAt", "time"],
  ["claimedUntil", "time"], ["deferReason"], ["lastError"], ["version"], ["createdAt", "time"],
  ["updatedAt", "time"],
];

/** The watch's event log, oldest first: one row per write. */
function WatchHistory({ events }) {
  const rows = events.edges.map((e) => e.node);
  return html`<table id="watch-events">
    <caption>
      Every write, oldest first${events.pageInfo.hasNextPage ? ` (the first ${rows.length})` : ""}
    </caption>
    <thead>
      <tr>
        <th scope="col">At</th>
        <th scope="col">Action</th>
        <th scope="col">By</th>
        <th scope="col" class="num">Generation</th>
        <th scope="col">Status</th>
        <th scope="col" class="num">Attempts</th>
        <th scope="col">Message</th>
      </tr>
    </thead>
    <tbody>
      ${rows.length === 0 && html`<tr><td colspan="7">No events.</td></tr>`}
      ${rows.map(
        (e) => html`<tr data-event=${e.action}>
          <td><${Time} ms=${e.at} /></td>
          <td>${e.action}</td>
          <td class="mono">${e.actorDID ?? html`<span class="note">the server</span>`}</td>
          <td class="num">${e.generation}</td>
          <td>${e.fromStatus ? `${e.fromStatus} → ${e.toStatus}` : e.toStatus}</td>
          <td class="num">${e.verificationAttempts}</td>
          <td>${e.message}</td>
        </tr>`,
      )}
    </tbody>
  </table>`;
}

function WatchView({ params }) {
  const identity = {
    ownerDID: params.get("owner") || "",
    connectorName: params.get("connector") || "",
    model: params.get("model") || "",
    accountKey: params.get("account") || "",
    sourceID: params.get("source") || "",
  };
  const [data, error, reload] = useQuery("DashboardWatch", { identity }, params.toString());
  // A subscription's filter has no source id: the events of the watches of its owner,
  // connector, model and account, and of their operations (an operation filter has no model).
  const { sourceID, ...watched } = identity;
  const { model, ...owned } = watched;
  useLive([watchEvents(watched), operationEvents(owned)], reload, params.toString());
  if (error) return html`<${Failure} error=${error} />`;
  if (!data) return html`<p aria-busy="true">Loading…</p>`;
  const watch = data.watch;
  if (!watch) return html`<h2>Watch</h2><p>No watch ${model} / ${sourceID} of ${identity.ownerDID} that this token may see.</p>`;
  return html`
    <h2>Watch <span class="mono">${watch.model} / ${watch.sourceID}</span></h2>
    ${watch.verificationStatus === "REPAIR_FAILED" &&
    html`<p class="actions"><${Rearm} watch=${watch} after=${reload} /></p>`}
    ${watch.lastError !== null &&
    html`<p class="error" id="last-error">Last error: ${watch.lastError}</p>`}
    <section aria-labelledby="watch-fields">
      <h3 id="watch-fields">Fields</h3>
      <${Fields} record=${watch} names=${WATCH_PAGE_FIELDS} />
    </section>
    <section aria-labelledby="watch-history">
      <h3 id="watch-history">History</h3>
      <${WatchHistory} events=${watch.events} />
    </section>
    <section aria-labelledby="watch-operations">
      <h3 id="watch-operations">Its operations</h3>
      ${watch.operations.length === 0
        ? html`<p>No operation of this watch that this token may see.</p>`
        : html`<ul id="watch-operation-links">
            ${watch.operations.map(
              (op) => html`<li data-operation=${op.operationID}>
                <a href=${operationLink(op)}>${op.operationID}</a>${" "}
                <span class="mono">${op.callerDID}</span>${" "}
                <span class=${`state-${op.state}`}>${op.state}</span>,${" "}
                ${plural(op.attempts, "attempt")}, updated <${Time} ms=${op.updatedAt} />
              </li>`,
            )}
          </ul>`}
    </section>
  `;
}

function Failures() {
  const [data, error, reload] = useQuery("DashboardFailures", { first: PAGE_SIZE }, "failures");
  useLive([operationEvents(), watchEvents()], reload, "failures");
  if (error) return html`<${Failure} error=${error} />`;
  if (!data) return html`<p aria-busy="true">Loading…</p>`;
  const operations = data.operations.edges.map((e) => e.node);
  const watches = data.watches.edges.map((e) => e.node);
  const unissued = operations.filter((op) => !op.reissuedAs);
  return html`
    <h2>Failures</h2>
    <p class="actions">
      ${unissued.length > 0 &&
      html`<${Action}
        field="reissueOperations"
        document="DashboardReissueOperations"
        label="Reissue every FAILED operation"
        input=${{ filter: { states: ["FAILED"] } }}
        count=${countReissuable({ states: ["FAILED"] })}
        remainingOf=${(d) => d.reissueOperations.remaining}
        done=${(d) => reissued(d.reissueOperations)}
        after=${reload}
      />`}
      ${watches.length > 0 &&
      html`<${Action}
        field="rearmWatches"
        document="DashboardRearmWatches"
        label="Re-arm every REPAIR_FAILED watch"
        input=${{ filter: { status: "REPAIR_FAILED" } }}
        count=${countRearmable({ status: "REPAIR_FAILED" })}
        remainingOf=${(d) => d.rearmWatches.remaining}
        done=${(d) =>
          `Re-armed ${plural(d.rearmWatches.rearmed, "watch", "watches")}.` +
          left(d.rearmWatches.remaining)}
        after=${reload}
      />`}
    </p>
    <table id="failed-operations">
      <caption>FAILED operations (oldest first${data.operations.pageInfo.hasNextPage
        ? html`; <a href=${link("operations", { state: "FAILED" })}>all of them</a>`
        : ""})</caption>
      <thead>
        <tr>
          <th scope="col">Operation</th>
          <th scope="col">Caller</th>
          <th scope="col">Connector</th>
          <th scope="col">Account</th>
          <th scope="col" class="num">Attempts</th>
          <th scope="col">Last outcome</th>
          <th scope="col">Last error</th>
          <th scope="col">Last updated</th>
          <th scope="col">Reissued as</th>
        </tr>
      </thead>
      <tbody>
        ${operations.length === 0 && html`<tr><td colspan="9">No failed operations.</td></tr>`}
        ${operations.map(
          (op) => html`<tr data-operation=${op.operationID}>
            <td><a href=${operationLink(op)}>${op.operationID}</a></td>
            <td class="mono">${op.callerDID}</td>
            <td>${op.connectorName}</td>
            <td>${op.accountKey}</td>
            <td class="num">${op.attempts}</td>
            <td>${[op.lastKind, op.lastHttpStatus].filter((v) => v !== null).join(" ")}</td>
            <td data-last-error>${op.lastError}</td>
            <td><${Time} ms=${op.updatedAt} /></td>
            <td>
              ${op.reissuedAs
                ? html`<a href=${operationLink(op.reissuedAs)}>${op.reissuedAs.operationID}</a>`
                : html`<${Action}
                    field="reissueOperations"
                    document="DashboardReissueOperations"
                    label="Reissue"
                    input=${{
                      filter: { callerDID: op.callerDID, operationID: op.operationID, states: ["FAILED"] },
                    }}
                    done=${(d) => reissued(d.reissueOperations)}
                    after=${reload}
                  />`}
            </td>
          </tr>`,
        )}
      </tbody>
    </table>
    <table id="failed-watches">
      <caption>REPAIR_FAILED watches</caption>
      <thead>
        <tr>
          <th scope="col">Owner</th>
          <th scope="col">Connector</th>
          <th scope="col">Account</th>
          <th scope="col">Model / source</th>
          <th scope="col">Document</th>
          <th scope="col" class="num">Generation</th>
          <th scope="col" class="num">Attempts</th>
          <th scope="col">Observed winner</th>
          <th scope="col">Last error</th>
          <th scope="col">Last updated</th>
          <th scope="col">Action</th>
        </tr>
      </thead>
      <tbody>
        ${watches.length === 0 && html`<tr><td colspan="11">No failed watches.</td></tr>`}
        ${watches.map(
          (w) => html`<tr data-watch=${w.sourceID}>
            <td class="mono">${w.ownerDID}</td>
            <td>${w.connectorName}</td>
            <td>${w.accountKey}</td>
            <td><a href=${watchLink(w)}>${w.model} / ${w.sourceID}</a></td>
            <td>${w.documentID}</td>
            <td class="num">${w.repairGeneration}</td>
            <td class="num">${w.verificationAttempts}</td>
            <td class="mono">${w.observedWinnerDigest}</td>
            <td data-last-error>${w.lastError}</td>
            <td><${Time} ms=${w.updatedAt} /></td>
            <td><${Rearm} watch=${w} after=${reload} /></td>
          </tr>`,
        )}
      </tbody>
    </table>
  `;
}

/** Every account of every connector the accounts know (those with no operation too), and
 * the connectors paused as a whole. */
async function allAccounts() {
  const { serverTime, connectors } = await run("DashboardConnectors", {});
  const accounts = [];
  for (const { connectorName } of connectors) {
    let after = null;
    do {
      const page = (await run("DashboardAccounts", { connectorName, after })).accounts;
      accounts.push(...page.edges.map((e) => e.node));
      after = page.pageInfo.hasNextPage ? page.pageInfo.endCursor : null;
    } while (after);
  }
  return { serverTime, connectors, accounts };
}

function Accounts() {
  const [state, setState] = useState({ data: null, error: null });
  const [round, setRound] = useState(0);
  const [spread, setSpread] = useState("0");
  const reload = () => setRound((n) => n + 1);
  useLive([operationEvents()], reload, "accounts");
  useRefresh(reload);
  useEffect(() => {
    allAccounts().then(
      (data) => setState({ data, error: null }),
      (error) => setState({ data: null, error }),
    );
  }, [round]);
  if (state.error) return html`<h2>Accounts</h2><${Failure} error=${state.error} />`;
  if (!state.data) return html`<p aria-busy="true">Loading…</p>`;
  const now = state.data.serverTime;
  const spreadMs = Math.max(0, Math.round(Number(spread) * 1000) || 0);
  const said = (verb) => (d) => {
    const p = d[`${verb}Account`];
    return p.account
      ? `${p.connectorName} / ${p.account.accountKey} is ${p.account.paused ? "paused" : "leased again"}.`
      : `Connector ${p.connectorName} is ${p.connectorPaused ? "paused" : "leased again"}.`;
  };
  return html`
    <h2>Accounts</h2>
    <p>
      <label
        >Resume spreads the account's due backlog over (seconds)${" "}
        <input type="number" min="0" max="86400" value=${spread} onInput=${(e) => setSpread(e.target.value)}
      /></label>
    </p>
    <p class="actions">
      ${state.data.connectors.map(({ connectorName, pausedAt }) => {
        const mine = state.data.accounts.filter((a) => a.connectorName === connectorName);
        const whole = pausedAt !== null;
        return whole
          ? html`<${Action}
              field="resumeAccount"
              document="DashboardResumeAccount"
              label=${`Resume connector ${connectorName}`}
              input=${{ connectorName, spreadMs }}
              rows=${mine.length}
              done=${said("resume")}
              after=${reload}
            />`
          : html`<${Action}
              field="pauseAccount"
              document="DashboardPauseAccount"
              label=${`Pause connector ${connectorName}`}
              input=${{ connectorName }}
              rows=${mine.length}
              done=${said("pause")}
              after=${reload}
            />`;
      })}
    </p>
    <table id="accounts">
      <caption>Provider accounts: caps and throttles</caption>
      <thead>
        <tr>
          <th scope="col">Connector</th>
          <th scope="col">Account</th>
          <th scope="col" class="num">In flight</th>
          <th scope="col" class="num">Cap</th>
          <th scope="col">Throttled until</th>
          <th scope="col">Paused</th>
          <th scope="col">Action</th>
        </tr>
      </thead>
      <tbody>
        ${state.data.accounts.length === 0 && html`<tr><td colspan="7">No accounts.</td></tr>`}
        ${state.data.accounts.map(
          (a) => html`<tr data-account=${`${a.connectorName}/${a.accountKey}`}>
            <th scope="row">${a.connectorName}</th>
            <td>${a.accountKey}</td>
            <td class="num">${a.inFlight}</td>
            <td class="num">${a.maxInFlight ?? html`<span class="note">none</span>`}</td>
            <td>
              ${a.throttledUntil !== null && a.throttledUntil > now
                ? html`<${Time} ms=${a.throttledUntil} />`
                : html`<span class="note">not throttled</span>`}
            </td>
            <td data-paused-state>
              ${a.pausedAt !== null
                ? html`since <${Time} ms=${a.pausedAt} />`
                : a.paused
                  ? "with its connector"
                  : html`<span class="note">no</span>`}
            </td>
            <td>
              ${a.pausedAt !== null
                ? html`<${Action}
                    field="resumeAccount"
                    document="DashboardResumeAccount"
                    label="Resume"
                    input=${{ connectorName: a.connectorName, accountKey: a.accountKey, spreadMs }}
                    done=${said("resume")}
                    after=${reload}
                  />`
                : html`<${Action}
                    field="pauseAccount"
                    document="DashboardPauseAccount"
                    label="Pause"
                    input=${{ connectorName: a.connectorName, accountKey: a.accountKey }}
                    done=${said("pause")}
                    after=${reload}
                  />`}
            </td>
          </tr>`,
        )}
      </tbody>
    </table>
  `;
}

// --- the frame -----------------------------------------------------------------------------

function SignIn({ onToken, reason }) {
  const [refused, setRefused] = useState(null);
  const submit = (event) => {
    event.preventDefault();
    const given = new FormData(event.target).get("token").trim();
    if (!given) return;
    const code = linkCode(given);
    if (code === null) {
      useToken(given);
      onToken();
      return;
    }
    exchange(code).then(onToken, (error) => setRefused(error.message));
  };
  return html`
    <main>
      <h2>Sign in</h2>
      ${(refused || reason) && html`<p class="error" role="alert">${refused || reason}</p>`}
      <p>
        Open a sign-in link: <code>connector-store serve</code> prints one when it starts,${" "}
        <code>connector-store sign-in-link</code> prints another (each works once, for a few
        minutes).
      </p>
      <form onSubmit=${submit}>
        <p>
          <label for="token">Or paste a sign-in link, or a bearer token (a JWT; <code>connector-store token</code> mints one)</label><br />
          <input id="token" name="token" type="password" size="60" autocomplete="off" required />
        </p>
        <button type="submit">Sign in</button>
        <p class="note">The token is kept in this tab's session storage only.</p>
      </form>
    </main>
  `;
}

const PAGES = {
  overview: Overview,
  operations: Operations,
  operation: OperationView,
  watch: WatchView,
  failures: Failures,
  accounts: Accounts,
};

function App() {
  const [route, setRoute] = useState(currentRoute());
  const [signedIn, setSignedIn] = useState(Boolean(storedToken()));
  const [signingIn, setSigningIn] = useState(linkCode(location.hash) !== null);
  const [reason, setReason] = useState(null);
  const [viewer, setViewer] = useState({ did: null, scopes: [], mutations: [] });
  const [notice, setNotice] = useState(null);
  useEffect(() => {
    if (!signedIn) return;
    run("DashboardViewer").then(
      (data) => setViewer(data.viewer),
      () => setViewer({ did: null, scopes: [], mutations: [] }),
    );
  }, [signedIn]);
  useEffect(() => {
    signInFromAddress().then(
      (opened) => {
        setSigningIn(false);
        if (opened) {
          setReason(null);
          setRoute(currentRoute());
          setSignedIn(true);
        }
      },
      (error) => {
        setSigningIn(false);
        setRoute(currentRoute());
        setReason(error.message);
        setSignedIn(Boolean(storedToken()));
      },
    );
  }, []);
  useEffect(() => {
    const moved = () => {
      setNotice(null);
      setRoute(currentRoute());
    };
    const refused = (event) => {
      closeLive();
      setReason(event.reason || null);
      setSignedIn(false);
    };
    addEventListener("hashchange", moved);
    addEventListener("signed-out", refused);
    return () => {
      removeEventListener("hashchange", moved);
      removeEventListener("signed-out", refused);
    };
  }, []);
  const header = html`<header>
    <h1>connector-store</h1>
    <nav aria-label="Views">
      <ul>
        ${VIEWS.map(
          ([view, label]) => html`<li>
            <a href=${link(view)} aria-current=${route.view === view ? "page" : undefined}
              >${label}</a
            >
          </li>`,
        )}
      </ul>
    </nav>
    <span class="who">
      ${signedIn && html`<${LiveIndicator} /> `}
      ${signedIn && viewer.did && html`<span class="mono">${viewer.did}</span> `}
      ${signedIn &&
      html`<button
        type="button"
        onClick=${() => {
          closeLive();
          signOut().then(() => {
            setReason(null);
            setSignedIn(false);
          });
        }}
      >
        Sign out
      </button>`}
    </span>
  </header>`;
  if (signingIn) return html`${header}<main><p role="status">Signing in…</p></main>`;
  if (!signedIn) {
    return html`${header}<${SignIn} reason=${reason} onToken=${() => {
      setReason(null);
      setSignedIn(true);
    }} />`;
  }
  const Page = PAGES[route.view] || Overview;
  return html`<${ViewerContext.Provider} value=${viewer}>
    <${NoticeContext.Provider} value=${setNotice}>
      ${header}
      <main>
        <p id="notice" role="status" class=${notice?.error ? "error" : "done"}>
          ${notice?.text || notice?.error?.message || ""}
        </p>
        <${Page} params=${route.params} />
      </main>
    <//>
  <//>`;
}

const root = document.getElementById("app");
root.textContent = "";
render(html`<${App} />`, root);
