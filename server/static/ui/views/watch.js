// One watch: its fields, history and operations.
import { html } from "/ui/assets/htm-preact-standalone.module.js";
import { useQuery } from "../lib/api.js";
import { useLive, operationEvents, watchEvents } from "../lib/live.js";
import {
  Action,
  plural,
  Time,
  Failure,
  operationLink,
  Fields,
  Rearm,
} from "../lib/common.js";
import { History } from "./operation.js";

export const WATCH_PAGE_FIELDS = [
  ["verificationStatus", "status"], ["ownerDID"], ["connectorName"], ["model"], ["accountKey"],
  ["sourceID"], ["documentID"], ["repairGeneration"], ["verificationAttempts"],
  ["observedWinnerDigest"], ["verifiedStateDigest"], ["nextAttemptAt", "time"],
  ["claimedUntil", "time"], ["deferReason"], ["lastError"], ["version"], ["createdAt", "time"],
  ["updatedAt", "time"],
];

/** The watch's event log, oldest first: one row per write. */
export function WatchHistory({ events }) {
  const rows = events.edges.map((e) => e.node);
  return html`<table tabindex="0" id="watch-events">
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

export function WatchView({ params }) {
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
