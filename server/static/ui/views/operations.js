// Operations: a filtered page of operations, and bulk actions on what the filter matches.
import { html, useContext } from "/ui/assets/htm-preact-standalone.module.js";
import { useQuery } from "../lib/api.js";
import { useLive, operationEvents } from "../lib/live.js";
import {
  PAGE_SIZE,
  STATES,
  Action,
  plural,
  left,
  countCancellable,
  countReissuable,
  reissued,
  link,
  Time,
  Failure,
  operationLink,
  typedTime,
  typedZone,
  ZoneContext,
  RiskBadge,
  OpID,
  RunBadge,
  RUNS,
  useReason,
} from "../lib/common.js";
import { SelectAll, SelectRow, SelectedActions, useSelection } from "../lib/selection.js";

export const FILTER_FIELDS = [
  "state", "run", "q", "error", "id", "connector", "account", "owner", "caller", "party", "document", "kind", "after_time",
  "before_time", "order",
];

/** Whether the screen is a phone's (the style's phone breakpoint): the filter form starts
 * folded there, so the rows come first. */
export function phone() {
  return matchMedia("(max-width: 40rem)").matches;
}

/** The page the view's parameters name: ``after`` a cursor, ``before`` one (backwards), or
 * the last page (``page=last``); else the first. ``order=newest`` lists newest first. */
export function pageOf(params) {
  const orderBy = params.get("order") === "newest" ? "NEWEST_FIRST" : "OLDEST_FIRST";
  if (params.get("before")) return { orderBy, last: PAGE_SIZE, before: params.get("before") };
  if (params.get("page") === "last") return { orderBy, last: PAGE_SIZE };
  return { orderBy, first: PAGE_SIZE, after: params.get("after") || null };
}

/** The ``OperationFilter`` the view's parameters name (times: date-time inputs read as
 * ``typedZone(zone)`` says). */
export function filterOf(params, zone) {
  const filter = {};
  const given = (name) => params.get(name) || null;
  if (given("state")) filter.states = given("state").split(",");
  if (given("run")) filter.run = given("run");
  if (given("q")) filter.search = given("q");
  if (given("error")) filter.lastError = given("error");
  if (given("id")) filter.operationID = given("id");
  if (given("connector")) filter.connectorName = given("connector");
  if (given("account")) filter.accountKey = given("account");
  if (given("owner")) filter.ownerDID = given("owner");
  if (given("caller")) filter.callerDID = given("caller");
  if (given("party")) filter.visibleTo = given("party");
  if (given("document")) filter.documentIDs = [given("document")];
  if (given("kind")) filter.kind = given("kind");
  if (given("after_time")) filter.updatedAfter = typedTime(given("after_time"), zone);
  if (given("before_time")) filter.updatedBefore = typedTime(given("before_time"), zone);
  return filter;
}

/** What may change whether an operation is listed under ``filter``: the events of the
 * operations of its fixed fields (an event's ``toState`` is what a filter's ``states`` match,
 * so an operation leaving the state shown would go unheard; a subscription refuses
 * ``documentIDs``, ``run`` and the times). */
export function liveFilter(filter) {
  const { states, run, search, lastError, kind, updatedAfter, updatedBefore, documentIDs, ...fixed } = filter;
  return Object.keys(fixed).length ? fixed : null;
}

/** The filter narrowed to ``state``, or null when it names another state. */
export function inState(filter, state) {
  if (filter.states && !filter.states.includes(state)) return null;
  return { ...filter, states: [state] };
}

export function Operations({ params }) {
  const page = pageOf(params);
  const later = Boolean(page.after || page.before || page.last);
  const zone = useContext(ZoneContext);
  const filter = filterOf(params, zone);
  const [data, error, reload] = useQuery(
    "DashboardOperations",
    { filter, ...page },
    `${params}|${zone}`,
  );
  useLive([operationEvents(liveFilter(filter))], reload, params.toString());
  const selection = useSelection(`${params}|${zone}`);
  const [reasonField, reason] = useReason();
  const form = Object.fromEntries(FILTER_FIELDS.map((n) => [n, params.get(n) || ""]));
  const submit = (event) => {
    event.preventDefault();
    const given = new FormData(event.target);
    const values = Object.fromEntries(given.entries());
    values.state = given.getAll("state").join(",");
    location.hash = link("operations", values);
  };
  const rows = data ? data.operations.edges.map((e) => e.node) : [];
  const leased = filter.run === "LEASED";
  const filtered = FILTER_FIELDS.filter((n) => n !== "order" && form[n]).length;
  const live = Object.keys(filter).length ? inState(filter, "ATTEMPTED") : null;
  const failed = Object.keys(filter).length ? inState(filter, "FAILED") : null;
  // The filter form is the user's until Apply: uncontrolled fields (defaultValue, selected),
  // so a live re-render keeps what is being typed; a new route remounts it (its key).
  return html`
    <h2>Operations</h2>
    <details class="filter-box" open=${!phone()}>
    <summary>Filter${filtered ? ` (${plural(filtered, "field")} set)` : ""}</summary>
    <form key=${params.toString()} class="filters" onSubmit=${submit} aria-label="Filter operations">
      <label
        >States (none chosen: any)
        <select name="state" multiple size=${STATES.length}>
          ${STATES.map(
            (s) => html`<option value=${s} selected=${form.state.split(",").includes(s)}>${s}</option>`,
          )}
        </select>
      </label>
      <label
        >Now
        <select name="run">
          <option value="" selected=${form.run === ""}>any</option>
          ${RUNS.map(([run, label]) => html`<option value=${run} selected=${form.run === run}>${label}</option>`)}
        </select>
      </label>
      <label
        >Search (a part of an ID, a target or a source; any case)
        <input name="q" type="search" defaultValue=${form.q}
      /></label>
      <label>Operation ID (exact) <input name="id" defaultValue=${form.id} /></label>
      <label>Connector <input name="connector" defaultValue=${form.connector} /></label>
      <label>Account <input name="account" defaultValue=${form.account} /></label>
      <label>Owner DID <input name="owner" defaultValue=${form.owner} /></label>
      <label>Caller DID <input name="caller" defaultValue=${form.caller} /></label>
      <label>Caller or owner DID <input name="party" defaultValue=${form.party} /></label>
      <label>Document ID <input name="document" defaultValue=${form.document} /></label>
      <label>Last outcome kind <input name="kind" defaultValue=${form.kind} /></label>
      <label>Last error (exact) <input name="error" defaultValue=${form.error} /></label>
      <label
        >Updated from (${typedZone(zone)})
        <input type="datetime-local" step="1" name="after_time" defaultValue=${form.after_time}
      /></label>
      <label
        >Updated before (${typedZone(zone)})
        <input type="datetime-local" step="1" name="before_time" defaultValue=${form.before_time}
      /></label>
      <label
        >Order
        <select name="order">
          <option value="" selected=${form.order !== "newest"}>Oldest first</option>
          <option value="newest" selected=${form.order === "newest"}>Newest first</option>
        </select>
      </label>
      <button type="submit">Apply</button>
    </form>
    </details>
    <p class="note">
      ${form.order === "newest" ? "Newest first" : "Oldest first"} (by when each was claimed).${" "}
      ${data && html`<span id="operations-total">${plural(data.operations.totalCount, "operation")} match.</span>`}
    </p>
    ${data && reasonField && html`<p class="actions">${reasonField}</p>`}
    ${data &&
    html`<p class="actions">
      ${live &&
      html`<${Action}
        field="cancelOperations"
        document="DashboardCancelOperations"
        label="Cancel the matching ATTEMPTED operations"
        input=${{ filter: live, reason }}
        count=${countCancellable(live)}
        bulk
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
        bulk
        done=${(d) => reissued(d.reissueOperations)}
        after=${reload}
      />`}
    </p>`}
    <${Failure} error=${error} />
    ${!data && !error && html`<p aria-busy="true">Loading…</p>`}
    ${data && html`<${SelectedActions} rows=${rows} selection=${selection} after=${reload} reason=${reason} />`}
    ${data &&
    html`<table tabindex="0" id="operations" class="cards">
        <caption>
          ${leased ? "Leased now: who runs what (its run marker), since its last write, until its lease expires" : "Operations"}${later ? " (a later page)" : ""}
        </caption>
        <thead>
          <tr>
            <${SelectAll} rows=${rows} selection=${selection} />
            <th scope="col">Operation</th>
            <th scope="col">State</th>
            <th scope="col">Last outcome</th>
            <th scope="col" class="num">Attempts</th>
            <th scope="col">Next attempt</th>
            ${leased && html`<th scope="col">Run marker</th><th scope="col">Since (last write)</th><th scope="col">Lease until</th>`}
            <th scope="col">Connector</th>
            <th scope="col">Account</th>
            <th scope="col">Caller</th>
            <th scope="col">Owner</th>
            <th scope="col">Claimed</th>
            <th scope="col">Updated</th>
          </tr>
        </thead>
        <tbody>
          ${rows.length === 0 && html`<tr><td colspan=${leased ? 15 : 12}>No operations match.</td></tr>`}
          ${rows.map(
            (op) => html`<tr data-operation=${op.operationID}>
              <${SelectRow} op=${op} selection=${selection} />
              <td data-label="Operation"><a href=${operationLink(op)}><${OpID} id=${op.operationID} /></a></td>
              <td data-label="State" class=${`state-${op.state}`} data-state>
                ${op.state}${" "}<${RiskBadge} op=${op} /><${RunBadge} op=${op} now=${data.serverTime} />
              </td>
              <td data-label="Last outcome">${[op.lastKind, op.lastHttpStatus].filter((v) => v !== null).join(" ")}</td>
              <td data-label="Attempts" class="num">${op.attempts}</td>
              <td data-label="Next attempt"><${Time} ms=${op.state === "ATTEMPTED" ? op.nextAttemptAt : null} /></td>
              ${leased &&
              html`<td data-label="Run marker" class="mono" data-marker>${op.sendMarker ?? html`<span class="note">no send yet</span>`}</td>
                <td data-label="Since (last write)"><${Time} ms=${op.updatedAt} /></td>
                <td data-label="Lease until" data-lease-until><${Time} ms=${op.leaseExpiresAt} /></td>`}
              <td data-label="Connector">${op.connectorName}</td>
              <td data-label="Account">${op.accountKey}</td>
              <td data-label="Caller" class="mono">${op.callerDID}</td>
              <td data-label="Owner" class="mono">${op.ownerDID}</td>
              <td data-label="Claimed"><${Time} ms=${op.createdAt} /></td>
              <td data-label="Updated"><${Time} ms=${op.updatedAt} /></td>
            </tr>`,
          )}
        </tbody>
      </table>
      <nav class="pager" aria-label="Pages">
        ${data.operations.pageInfo.hasPreviousPage &&
        html`<a href=${link("operations", { ...form })}>First page</a>
          <a href=${link("operations", { ...form, before: data.operations.pageInfo.startCursor })}
            >Previous page</a
          >`}
        ${data.operations.pageInfo.hasNextPage &&
        html`<a href=${link("operations", { ...form, after: data.operations.pageInfo.endCursor })}
            >Next page</a
          >
          <a href=${link("operations", { ...form, page: "last" })}>Last page</a>`}
      </nav>`}
  `;
}
