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
  OpID,
  duration,
  runOf,
  RunBadge,
  CANCEL_REASON,
  RetryNow,
  Rearm,
  Reissue,
  RiskBadge,
  outcomeUnknown,
  OUTCOME_UNKNOWN_RISK,
} from "../lib/common.js";

/** The operation's fields: [API name, kind, label]. */
export const OPERATION_FIELDS = [
  ["state", "state", "State"], ["callerDID", null, "Caller"], ["operationID", null, "Operation ID"],
  ["ownerDID", null, "Owner"], ["connectorName", null, "Connector"], ["accountKey", null, "Account"],
  ["model", null, "Model"], ["op", null, "Write"], ["target", null, "Target"],
  ["sourceID", null, "Source ID"], ["documentID", null, "Document"], ["attempts", null, "Attempts"],
  ["lastKind", null, "Last outcome"], ["lastHttpStatus", null, "Last HTTP status"],
  ["lastError", null, "Last error"], ["nextAttemptAt", "time", "Next attempt"],
  ["deferReason", null, "Deferred because"], ["sendMarker", null, "Send marker"],
  ["leaseExpiresAt", "time", "Lease expires"], ["createdAt", "time", "Claimed"],
  ["updatedAt", "time", "Last written"], ["version", null, "Version"],
  ["incarnation", null, "Incarnation"], ["deterministicEventID", null, "Deterministic event ID"],
  ["payloadHash", null, "Payload hash"], ["providerEtag", null, "Provider ETag"],
  ["reissueIntent", "json", "Reissue intent"], ["resultEntity", "json", "Result entity"],
  ["nodeKey", null, "Node key"],
];

/** What only a live (ATTEMPTED) operation has: a lease and a next attempt; a finished one's
 * are stale and not shown. */
const LIVE_ONLY = new Set(["leaseExpiresAt", "nextAttemptAt", "deferReason"]);

/** How long the operation has waited (ATTEMPTED: from its claim to the server's ``now``) or
 * ran (finished: from its claim to its last write), as a sentence. */
export function durations(op, now) {
  if (op.state === "ATTEMPTED") return `Waiting for ${duration(now - op.createdAt)} since its claim.`;
  return `Ran for ${duration(op.updatedAt - op.createdAt)}, from its claim to ${op.state}.`;
}
export const WATCH_FIELDS = [
  ["verificationStatus", "status"], ["repairGeneration"], ["verificationAttempts"],
  ["documentID"], ["observedWinnerDigest"], ["verifiedStateDigest"],
  ["nextAttemptAt", "time"], ["claimedUntil", "time"], ["deferReason"], ["lastError"],
  ["updatedAt", "time"],
];

/** The operation's event log, oldest first: one row per write. */
export function History({ events }) {
  const rows = events.edges.map((e) => e.node);
  return html`<table tabindex="0" id="operation-events" class="cards">
    <caption>
      Every write, oldest first${events.pageInfo.hasNextPage ? ` (the first ${rows.length})` : ""}
    </caption>
    <thead>
      <tr>
        <th scope="col">At</th>
        <th scope="col">Action</th>
        <th scope="col">Outcome</th>
        <th scope="col">Message</th>
        <th scope="col">State</th>
        <th scope="col" class="num">Attempts</th>
        <th scope="col">By</th>
      </tr>
    </thead>
    <tbody>
      ${rows.length === 0 && html`<tr><td colspan="7">No events.</td></tr>`}
      ${rows.map(
        (e) => html`<tr data-event=${e.action}>
          <td data-label="At"><${Time} ms=${e.at} /></td>
          <td data-label="Action">${e.action}</td>
          <td data-label="Outcome" data-outcome>${[e.kind, e.httpStatus].filter((v) => v !== null).join(" ")}</td>
          <td data-label="Message" data-message>${e.message}</td>
          <td data-label="State">${e.fromState ? `${e.fromState} → ${e.toState}` : e.toState}</td>
          <td data-label="Attempts" class="num">${e.attempts}</td>
          <td data-label="By" class="mono">${e.actorDID ?? html`<span class="note">the server</span>`}</td>
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
    <p id="op-durations">
      <span class=${`state-${op.state}`}>${op.state}</span>${" "}<${RunBadge} op=${op} now=${data.serverTime} />.
      ${durations(op, data.serverTime)}
    </p>
    <p class="actions">
      ${op.state === "ATTEMPTED" &&
      html`<${Action}
          field="cancelOperations"
          document="DashboardCancelOperations"
          label="Cancel"
          input=${{ filter: { ...key, states: ["ATTEMPTED"] }, reason: CANCEL_REASON }}
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
      ${["SCHEDULED", "DEFERRED"].includes(runOf(op, data.serverTime)) && html`<${RetryNow} op=${op} after=${reload} />`}
    </p>
    ${outcomeUnknown(op) &&
    html`<p class="risk-line" id="outcome-unknown"><${RiskBadge} op=${op} /> ${OUTCOME_UNKNOWN_RISK}</p>`}
    ${op.reissuedFrom &&
    html`<p>Reissues <a href=${operationLink(op.reissuedFrom)}><${OpID} id=${op.reissuedFrom.operationID} /></a>.</p>`}
    ${op.lastError !== null &&
    html`<p class="error" id="last-error">Last error: ${op.lastError}</p>`}
    ${op.reissuedAs &&
    html`<p>
      Reissued as <a href=${operationLink(op.reissuedAs)}><${OpID} id=${op.reissuedAs.operationID} /></a>${" "}
      (${op.reissuedAs.state}).
    </p>`}
    <section aria-labelledby="op-fields">
      <h3 id="op-fields">Fields</h3>
      <${Fields}
        record=${op}
        names=${OPERATION_FIELDS.filter(([name]) => op.state === "ATTEMPTED" || !LIVE_ONLY.has(name))}
      />
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
