// What every view shares: what the token may do, the operator action button, routes and
// formatting.
import {
  createContext,
  html,
  useContext,
  useEffect,
  useRef,
  useState,
} from "/ui/assets/htm-preact-standalone.module.js";
import { run } from "./api.js";

export const PAGE_SIZE = 50;
export const STATES = ["ATTEMPTED", "COMMITTED", "FAILED", "SUPERSEDED"];
export const STATUSES = ["PENDING_VERIFICATION", "VERIFIED", "REPAIR_FAILED"];

// --- what the token may do -----------------------------------------------------------------

/** The viewer (``viewer { did scopes mutations }``); an action is shown only when its
 * mutation is in ``mutations``. Empty until it has loaded: no button before the answer. */
export const ViewerContext = createContext({ did: null, scopes: [], mutations: [] });

/** Tells the page what an action did (``{ text }``) or why it failed (``{ error }``): shown
 * in the page's status line, which outlives the view's reload after the action. */
export const NoticeContext = createContext(() => {});

export function useViewer() {
  return useContext(ViewerContext);
}

export function readsAll(viewer) {
  return viewer.scopes.includes("observer");
}

/** The most rows one round of a bulk mutation touches (its ``limit``, the API's most). */
export const ROUND = 1000;

/** How the answers of a bulk mutation's rounds add up (by its field): how many rows a
 * payload touched, and two rounds' payloads as one (the later one's ``remaining`` and
 * ``skipped``, as those are counted after each call). */
export const BULK = {
  cancelOperations: {
    touched: (p) => p.cancelled,
    add: (a, b) => ({ cancelled: a.cancelled + b.cancelled, remaining: b.remaining }),
  },
  reissueOperations: {
    touched: (p) => p.operations.length,
    add: (a, b) => ({ operations: [...a.operations, ...b.operations], skipped: b.skipped, remaining: b.remaining }),
  },
  rearmWatches: {
    touched: (p) => p.rearmed,
    add: (a, b) => ({ rearmed: a.rearmed + b.rearmed, remaining: b.remaining }),
  },
};

/**
 * A button running one operator mutation, shown only when the token may use it. It asks
 * first when it touches more than one row (``rows`` above 1) or when ``count`` is given (an
 * async function answering the exact number of rows it would touch now, from the API), or
 * when ``risk`` says what a single row risks; the confirmation takes the focus, and Escape
 * or Back leaves it. Then it says what it did (``done(data)``, in the page's status line)
 * and calls ``after()``. A ``bulk`` action (``field`` one of ``BULK``) runs round after
 * round of ``ROUND`` rows until no row is left, showing its progress with a Stop button;
 * ``done`` gets the rounds' payloads added up; when stopped with rows left, its
 * confirmation stays open to go on. ``check()``, when given, answers why the input is
 * refused (a sentence) or null, before anything is asked or sent. ``perform`` (an async
 * function answering data as ``run`` does) replaces the one run of ``document`` with
 * ``input``: an action over selected rows runs it once a row.
 */
export function Action({ field, document, input, label, rows = 1, count, risk, done, bulk = false, check, perform, after = () => {} }) {
  const viewer = useViewer();
  const notice = useContext(NoticeContext);
  const [stage, setStage] = useState("idle");
  const [touches, setTouches] = useState(null);
  const [progress, setProgress] = useState(0);
  const stopped = useRef(false);
  const group = useRef(null);
  const opener = useRef(null);
  useEffect(() => {
    if (stage === "confirm" || stage === "running") group.current?.querySelector("button:not([disabled])")?.focus();
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
  const rounds = async () => {
    const adding = BULK[field];
    let total = null;
    let touched = 0;
    stopped.current = false;
    setProgress(0);
    for (;;) {
      const payload = (await run(document, { input: { ...input, limit: ROUND } }))[field];
      total = total === null ? payload : adding.add(total, payload);
      touched = adding.touched(payload);
      setProgress(adding.touched(total));
      if (total.remaining === 0 || touched === 0 || stopped.current) return { [field]: total };
    }
  };
  const go = () => {
    setStage("running");
    const answer = perform ? perform() : bulk ? rounds() : run(document, { input });
    answer.then(
      (data) => {
        notice({ text: done(data) });
        after();
        const remaining = bulk ? data[field].remaining : 0;
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
    const refused = check ? check() : null;
    if (refused) {
      notice({ error: { message: refused } });
      return;
    }
    if (count) {
      setStage("counting");
      count().then(ask, (error) => {
        leave();
        notice({ error });
      });
    } else if (rows === 1 && !risk) go();
    else ask(rows);
  };
  if (stage === "running" && bulk) {
    return html`<span class="action-group">
      <span role="group" aria-label=${`Running: ${label}`} class="confirm" ref=${group}>
        ${label}:${" "}
        <progress max=${touches || 1} value=${progress} aria-label=${`${label}: progress`}></progress>${" "}
        <span data-progress>${progress} of ${touches} done</span>${" "}
        <button type="button" onClick=${() => (stopped.current = true)}>Stop</button>
      </span>
    </span>`;
  }
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

export function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/** What a bulk action left (its ``remaining``): nothing, or how many still match (a
 * stopped action's confirmation stays open to go on). */
export function left(remaining) {
  return remaining === 0 ? "" : ` ${remaining} still match: confirm to go on.`;
}

/** The exact number of rows each bulk action would touch now, from the API. */
export const countCancellable = (filter) => () =>
  run("DashboardCountCancellable", { filter }).then((d) => d.cancellableCount);
export const countReissuable = (filter, include = []) => () =>
  run("DashboardCountReissuable", { filter, include }).then((d) => d.reissuableCount.remaining);
export const countRearmable = (filter) => () =>
  run("DashboardCountRearmable", { filter }).then((d) => d.rearmableCount);

/** A reissue's answer in a sentence: what it made, what it skipped and why (its
 * ``skipped``), and what is left (``remaining``). */
export function reissued(answer) {
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

/** Whether ``op``'s outcome is unknown: FAILED while its send was still marked (no answer
 * recorded for it), so the provider may hold the write (the API's ``OUTCOME_UNKNOWN``). */
export function outcomeUnknown(op) {
  return op.state === "FAILED" && op.sendMarker !== null && op.sendMarker !== undefined;
}

export const OUTCOME_UNKNOWN_RISK =
  "Its outcome is unknown: its send was marked and no answer was recorded, so the provider " +
  "may already hold the write, and a reissue may send it a second time.";

/** The badge of a risky state where a row is seen: OUTCOME_UNKNOWN (``outcomeUnknown``). */
export function RiskBadge({ op }) {
  if (!outcomeUnknown(op)) return null;
  return html`<span class="badge badge-risk" data-risk="OUTCOME_UNKNOWN" title=${OUTCOME_UNKNOWN_RISK}
    >OUTCOME_UNKNOWN</span
  >`;
}

/** The reissue of one FAILED operation ``op`` never reissued, including the risks it holds:
 * an unknown outcome is reissued only by "Reissue anyway", after a confirmation saying what
 * it risks; a cancelled one after a confirmation too. */
export function Reissue({ op, after }) {
  const include = [];
  if (outcomeUnknown(op)) include.push("OUTCOME_UNKNOWN");
  if (op.lastKind === "cancelled") include.push("CANCELLED");
  const risk = outcomeUnknown(op)
    ? OUTCOME_UNKNOWN_RISK
    : op.lastKind === "cancelled"
      ? "An operator cancelled it: a reissue sends it after all."
      : undefined;
  return html`<${Action}
    field="reissueOperations"
    document="DashboardReissueOperations"
    label=${outcomeUnknown(op) ? "Reissue anyway — may send again" : "Reissue"}
    input=${{ filter: { callerDID: op.callerDID, operationID: op.operationID, states: ["FAILED"] }, include }}
    risk=${risk}
    done=${(d) => reissued(d.reissueOperations)}
    after=${after}
  />`;
}

/** Where an ATTEMPTED operation stands at ``now`` (the server's, epoch ms), as the API's
 * ``OperationRun`` says: "LEASED" (a live lease), "DUE", "SCHEDULED" (a retry or a delay)
 * or "DEFERRED"; null for a finished one. */
export function runOf(op, now) {
  if (op.state !== "ATTEMPTED") return null;
  if (op.leaseExpiresAt !== null && op.leaseExpiresAt >= now) return "LEASED";
  if (op.nextAttemptAt === null || op.nextAttemptAt <= now) return "DUE";
  return op.deferReason ? "DEFERRED" : "SCHEDULED";
}

export const RUNS = [
  ["LEASED", "leased (a worker holds it)"],
  ["DUE", "due (waiting for a worker)"],
  ["SCHEDULED", "scheduled (a retry or a delay)"],
  ["DEFERRED", "deferred (offline or auth)"],
];

/** The badge of where an ATTEMPTED operation stands now (``runOf``), with until when. */
export function RunBadge({ op, now }) {
  const run = runOf(op, now);
  if (run === null) return null;
  const until = run === "LEASED" ? op.leaseExpiresAt : run === "DUE" ? null : op.nextAttemptAt;
  return html`<span class=${`badge badge-run`} data-run=${run}
    >${run.toLowerCase()}${run === "DEFERRED" ? ` (${op.deferReason.toLowerCase()})` : ""}${until !== null
      ? html` until <${Time} ms=${until} />`
      : ""}</span
  >`;
}

/** Retry now a live operation waiting for a later attempt (scheduled or deferred): due at
 * once (``deferOperation`` with ``delayMs`` 0 and no reason), its last error kept. */
export function RetryNow({ op, after }) {
  return html`<${Action}
    field="deferOperation"
    document="DashboardRetryNow"
    label="Retry now"
    input=${{ callerDID: op.callerDID, operationID: op.operationID, delayMs: 0, errorMessage: op.lastError }}
    done=${(d) => (d.deferOperation.applied ? "Due now: the next worker leases it." : "Not retried: its lease is held now.")}
    after=${after}
  />`;
}

/** What a cancel says in each operation's History when no reason is typed. */
export const CANCEL_REASON = "cancelled from the dashboard";

/** The reason an operator types for a cancel (kept as each operation's last error and in its
 * History), shown where the token may cancel: [field, reason to send]. */
export function useReason() {
  const viewer = useViewer();
  const [reason, setReason] = useState("");
  const field = viewer.mutations.includes("cancelOperations")
    ? html`<label class="reason"
        >Reason for a cancel (kept in each operation's History)${" "}
        <input name="reason" maxlength="500" size="40" value=${reason} onInput=${(e) => setReason(e.target.value)}
      /></label>`
    : null;
  return [field, reason.trim() ? `${CANCEL_REASON}: ${reason.trim()}` : CANCEL_REASON];
}

// --- routes --------------------------------------------------------------------------------

export const VIEWS = [
  ["overview", "Overview"],
  ["operations", "Operations"],
  ["failures", "Failures"],
  ["watches", "Watches"],
  ["accounts", "Accounts"],
];

export function currentRoute() {
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  return { view: path || "overview", params: new URLSearchParams(query || "") };
}

export function link(view, params = {}) {
  const query = new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ""),
  ).toString();
  return `#/${view}${query ? `?${query}` : ""}`;
}

// --- formatting ----------------------------------------------------------------------------

/** How times are shown and typed, the user's choice (kept in the browser's local storage):
 * in UTC, in the browser's local time, or relative to now (typed in UTC). */
export const ZONES = [
  ["utc", "UTC"],
  ["local", "local time"],
  ["relative", "relative"],
];
const ZONE_KEY = "connector-store.dashboard.times";

/** The zone chosen last in this browser; UTC at first. */
export function savedZone() {
  const saved = localStorage.getItem(ZONE_KEY);
  return ZONES.some(([zone]) => zone === saved) ? saved : "utc";
}

export function saveZone(zone) {
  localStorage.setItem(ZONE_KEY, zone);
}

/** The zone the page shows times in (``ZONES``). */
export const ZoneContext = createContext("utc");

/** The zone typed times are read in: the local time when times are shown in it, else UTC. */
export function typedZone(zone) {
  return zone === "local" ? "local time" : "UTC";
}

/** Epoch ms of a date-time input's value (``YYYY-MM-DDTHH:MM[:SS]``) read as ``typedZone``
 * says. */
export function typedTime(value, zone) {
  return new Date(zone === "local" ? value : `${value}Z`).getTime();
}

const pad = (n) => String(n).padStart(2, "0");

function relative(delta) {
  const s = Math.round(Math.abs(delta) / 1000);
  const [n, unit] =
    s < 60 ? [s, "s"] : s < 3600 ? [Math.round(s / 60), "min"] : s < 86400
      ? [Math.round(s / 3600), "h"] : [Math.round(s / 86400), "d"];
  return delta < 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`;
}

/** ``ms`` (epoch ms) as text in ``zone``. */
export function time(ms, zone = "utc") {
  if (ms === null || ms === undefined) return "";
  const d = new Date(ms);
  if (zone === "local") {
    const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
    return `${day} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  if (zone === "relative") return relative(ms - Date.now());
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function Time({ ms }) {
  const zone = useContext(ZoneContext);
  if (ms === null || ms === undefined) return html`<span class="note">—</span>`;
  const iso = new Date(ms).toISOString();
  return html`<time datetime=${iso} title=${zone === "utc" ? undefined : time(ms)}
    >${time(ms, zone)}</time
  >`;
}

export function Num({ value, label }) {
  return html`<td class=${value ? "num" : "num zero"} data-count=${label}>${value}</td>`;
}

export function Failure({ error }) {
  if (!error) return null;
  return html`<p class="error" role="alert">${error.message}</p>`;
}

/** An operation id as a list shows it: a long one (a reissue's is ``reissue:`` and 64 hex
 * digits) by its start and end, which tell two apart, the whole id in its title. */
export function OpID({ id }) {
  if (id.length <= 32) return id;
  const start = id.startsWith("reissue:") ? 16 : 12;
  return html`<span class="short-id" title=${id} data-id=${id}>${id.slice(0, start)}…${id.slice(-6)}</span>`;
}

/** ``ms`` (a duration) in words: "850 ms", "42 s", "3 min 5 s", "2 h 10 min", "3 d 4 h". */
export function duration(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export function operationLink(op) {
  return link("operation", { caller: op.callerDID, id: op.operationID });
}

/** The page of a watch: its identity (owner, connector, model, account, source). */
export function watchLink(w) {
  return link("watch", {
    owner: w.ownerDID,
    connector: w.connectorName,
    model: w.model,
    account: w.accountKey,
    source: w.sourceID,
  });
}

/** A record's fields as a list of terms: ``names`` holds ``[name, kind, label]`` (kind:
 * "time", "json", "state", "status" or none; label: what the term says, else the API's
 * name, which each term keeps in its title). */
export function Fields({ record, names }) {
  return html`<dl class="fields">
    ${names.map(([name, kind, label]) => {
      const value = record[name];
      let shown = value;
      if (kind === "time") shown = html`<${Time} ms=${value} />`;
      else if (kind === "json") shown = value === null ? "null" : JSON.stringify(value);
      else if (value === null || value === undefined) shown = html`<span class="note">null</span>`;
      return html`<dt title=${label ? name : undefined}>${label || name}</dt><dd data-field=${name} class=${kind === "state" || kind === "status" ? `${kind}-${value}` : ""}>${shown}</dd>`;
    })}
  </dl>`;
}

/** Re-arm one REPAIR_FAILED watch: the filter names its whole identity (owner, connector,
 * model, account and source), so it touches that watch and none of its siblings. */
export function Rearm({ watch, after }) {
  const filter = {
    ownerDID: watch.ownerDID,
    connectorName: watch.connectorName,
    model: watch.model,
    accountKey: watch.accountKey,
    sourceID: watch.sourceID,
    status: "REPAIR_FAILED",
  };
  return html`<${Action}
    field="rearmWatches"
    document="DashboardRearmWatches"
    label="Re-arm"
    input=${{ filter, limit: 1 }}
    done=${(d) => `Re-armed ${plural(d.rearmWatches.rearmed, "watch", "watches")}.`}
    after=${after}
  />`;
}

/** Whether ``account`` (``DashboardAccounts``) is throttled at ``now`` (epoch ms, the
 * server's). */
export function throttled(account, now) {
  return account.throttledUntil !== null && account.throttledUntil > now;
}

/** The badge of a throttled account: until when it is leased nothing. */
export function ThrottleBadge({ account, now }) {
  if (!throttled(account, now)) return null;
  return html`<span class="badge badge-risk" data-risk="THROTTLED">throttled until <${Time} ms=${account.throttledUntil} /></span>`;
}

/** End an account's throttle now (liftThrottle), where the token may; it asks first. */
export function LiftThrottle({ account, after }) {
  const name = `${account.connectorName} / ${account.accountKey}`;
  return html`<${Action}
    field="liftThrottle"
    document="DashboardLiftThrottle"
    label="Lift throttle"
    input=${{ connectorName: account.connectorName, accountKey: account.accountKey }}
    risk=${`${name} is leased again now: if the provider still refuses, its operations fail their attempts.`}
    done=${() => `${name} is no longer throttled.`}
    after=${after}
  />`;
}

/** Every account of every connector the accounts know (those with no operation too), and
 * the connectors paused as a whole. */
export async function allAccounts() {
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
