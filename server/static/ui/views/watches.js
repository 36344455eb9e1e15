// Watches: a filtered page of watches, with their actions (re-arm a REPAIR_FAILED one, or
// every matching one; verify one again).
import { html } from "/ui/assets/htm-preact-standalone.module.js";
import { useQuery } from "../lib/api.js";
import { useLive, watchEvents } from "../lib/live.js";
import {
  PAGE_SIZE,
  STATUSES,
  Action,
  plural,
  left,
  countRearmable,
  link,
  Time,
  Failure,
  watchLink,
  Rearm,
} from "../lib/common.js";

export const WATCH_FILTER_FIELDS = ["status", "connector", "account", "owner", "model", "document"];

/** The ``WatchFilter`` the view's parameters name. */
export function watchFilterOf(params) {
  const filter = {};
  const given = (name) => params.get(name) || null;
  if (given("status")) filter.status = given("status");
  if (given("connector")) filter.connectorName = given("connector");
  if (given("account")) filter.accountKey = given("account");
  if (given("owner")) filter.ownerDID = given("owner");
  if (given("model")) filter.model = given("model");
  if (given("document")) filter.documentIDs = [given("document")];
  return filter;
}

/** Verify a watch again: a MANUAL arm opens a new repair generation, due now. It asks first:
 * a verifier working on the current generation has its result refused. */
function VerifyAgain({ watch, now, after }) {
  const identity = {
    ownerDID: watch.ownerDID,
    connectorName: watch.connectorName,
    model: watch.model,
    accountKey: watch.accountKey,
    sourceID: watch.sourceID,
  };
  return html`<${Action}
    field="armWatch"
    document="DashboardArmWatch"
    label="Verify again"
    input=${{ identity, reason: "MANUAL", dueAt: now }}
    risk="A new repair generation opens, due now: a verifier working on this one has its result refused."
    done=${(d) =>
      d.armWatch.outcome === "OPENED"
        ? `Opened generation ${watch.repairGeneration + 1} of ${watch.sourceID}.`
        : `Nothing changed (${d.armWatch.outcome}).`}
    after=${after}
  />`;
}

export function Watches({ params }) {
  const after = params.get("after") || null;
  const filter = watchFilterOf(params);
  const [data, error, reload] = useQuery(
    "DashboardWatches",
    { filter, first: PAGE_SIZE, after },
    params.toString(),
  );
  // A watch stream refuses documentIDs: without it, the events of the same watches and more.
  const { documentIDs, ...streamed } = filter;
  useLive([watchEvents(Object.keys(streamed).length ? streamed : null)], reload, params.toString());
  const form = Object.fromEntries(WATCH_FILTER_FIELDS.map((n) => [n, params.get(n) || ""]));
  const submit = (event) => {
    event.preventDefault();
    location.hash = link("watches", Object.fromEntries(new FormData(event.target).entries()));
  };
  const rows = data ? data.watches.edges.map((e) => e.node) : [];
  const failed = filter.status && filter.status !== "REPAIR_FAILED" ? null : { ...filter, status: "REPAIR_FAILED" };
  return html`
    <h2>Watches</h2>
    <form key=${params.toString()} class="filters" onSubmit=${submit} aria-label="Filter watches">
      <label
        >Status
        <select name="status">
          <option value="" selected=${form.status === ""}>any</option>
          ${STATUSES.map((s) => html`<option value=${s} selected=${form.status === s}>${s}</option>`)}
        </select>
      </label>
      <label>Connector <input name="connector" defaultValue=${form.connector} /></label>
      <label>Account <input name="account" defaultValue=${form.account} /></label>
      <label>Owner DID <input name="owner" defaultValue=${form.owner} /></label>
      <label>Model <input name="model" defaultValue=${form.model} /></label>
      <label>Document ID <input name="document" defaultValue=${form.document} /></label>
      <button type="submit">Apply</button>
    </form>
    <p class="note">In identity order (owner, connector, model, account, source).</p>
    ${data &&
    failed &&
    html`<p class="actions">
      <${Action}
        field="rearmWatches"
        document="DashboardRearmWatches"
        label="Re-arm the matching REPAIR_FAILED watches"
        input=${{ filter: failed }}
        count=${countRearmable(failed)}
        bulk
        done=${(d) =>
          `Re-armed ${plural(d.rearmWatches.rearmed, "watch", "watches")}.` +
          left(d.rearmWatches.remaining)}
        after=${reload}
      />
    </p>`}
    <${Failure} error=${error} />
    ${!data && !error && html`<p aria-busy="true">Loading…</p>`}
    ${data &&
    html`<table tabindex="0" id="watches">
        <caption>Watches${after ? " (a later page)" : ""}</caption>
        <thead>
          <tr>
            <th scope="col">Model / source</th>
            <th scope="col">Owner</th>
            <th scope="col">Connector</th>
            <th scope="col">Account</th>
            <th scope="col">Status</th>
            <th scope="col" class="num">Generation</th>
            <th scope="col" class="num">Attempts</th>
            <th scope="col">Next attempt</th>
            <th scope="col">Last error</th>
            <th scope="col">Updated</th>
            <th scope="col">Actions</th>
          </tr>
        </thead>
        <tbody>
          ${rows.length === 0 && html`<tr><td colspan="11">No watches match.</td></tr>`}
          ${rows.map(
            (w) => html`<tr data-watch=${w.sourceID}>
              <td><a href=${watchLink(w)}>${w.model} / ${w.sourceID}</a></td>
              <td class="mono">${w.ownerDID}</td>
              <td>${w.connectorName}</td>
              <td>${w.accountKey}</td>
              <td class=${`status-${w.verificationStatus}`} data-status>${w.verificationStatus}</td>
              <td class="num">${w.repairGeneration}</td>
              <td class="num">${w.verificationAttempts}</td>
              <td><${Time} ms=${w.nextAttemptAt} /></td>
              <td data-last-error>${w.lastError}</td>
              <td><${Time} ms=${w.updatedAt} /></td>
              <td>
                <span class="actions">
                  ${w.verificationStatus === "REPAIR_FAILED" && html`<${Rearm} watch=${w} after=${reload} />`}
                  <${VerifyAgain} watch=${w} now=${data.serverTime} after=${reload} />
                </span>
              </td>
            </tr>`,
          )}
        </tbody>
      </table>
      <nav class="pager" aria-label="Pages">
        ${after && html`<a href=${link("watches", { ...form })}>First page</a>`}
        ${data.watches.pageInfo.hasNextPage &&
        html`<a href=${link("watches", { ...form, after: data.watches.pageInfo.endCursor })}
          >Next page</a
        >`}
      </nav>`}
  `;
}
