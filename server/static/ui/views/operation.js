// One operation: its fields, history, watch and actions.
import { html } from "/ui/assets/htm-preact-standalone.module.js";
import { useQuery } from "../lib/api.js";
import { useLive, operationEvents, watchEvents } from "../lib/live.js";
import {
  Action,
  plural,
  left,
  Time,
  Failure,
  operationLink,
  watchLink,
  Fields,
  Rearm,
  Reissue,
  RiskBadge,
  outcomeUnknown,
  OUTCOME_UNKNOWN_RISK,
} from "../lib/common.js";

export const OPERATION_FIELDS = [
  ["state", "state"], ["callerDID"], ["operationID"], ["ownerDID"], ["connectorName"],
  ["accountKey"], ["model"], ["op"], ["target"], ["sourceID"], ["documentID"],
  ["attempts"], ["lastKind"], ["lastHttpStatus"], ["lastError"], ["nextAttemptAt", "time"], ["deferReason"],
  ["sendMarker"], ["leaseExpiresAt", "time"], ["version"], ["incarnation"],
  ["deterministicEventID"], ["payloadHash"], ["providerEtag"], ["reissueIntent", "json"],
  ["resultEntity", "json"], ["nodeKey"], ["createdAt", "time"], ["updatedAt", "time"],
];
export const WATCH_FIELDS = [
  ["verificationStatus", "status"], ["repairGeneration"], ["verificationAttempts"],
  ["documentID"], ["observedWinnerDigest"], ["verifiedStateDigest"],
  ["nextAttemptAt", "time"], ["claimedUntil", "time"], ["deferReason"], ["lastError"],
  ["updatedAt", "time"],
];

/** The operation's event log, oldest first: one row per write. */
export function History({ events }) {
  const rows = events.edges.map((e) => e.node);
  return html`<table tabindex="0" id="operation-events">
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

export function OperationView({ params }) {
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
      ${op.state === "FAILED" && !op.reissuedAs && html`<${Reissue} op=${op} after=${reload} />`}
    </p>
    ${outcomeUnknown(op) &&
    html`<p class="risk-line" id="outcome-unknown"><${RiskBadge} op=${op} /> ${OUTCOME_UNKNOWN_RISK}</p>`}
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
