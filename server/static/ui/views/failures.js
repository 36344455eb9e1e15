// Failures: FAILED operations and REPAIR_FAILED watches, with their actions.
import { html } from "/ui/assets/htm-preact-standalone.module.js";
import { useQuery } from "../lib/api.js";
import { useLive, operationEvents, watchEvents } from "../lib/live.js";
import {
  PAGE_SIZE,
  Action,
  plural,
  left,
  countReissuable,
  countRearmable,
  reissued,
  link,
  Time,
  Failure,
  operationLink,
  watchLink,
  Rearm,
} from "../lib/common.js";

export function Failures() {
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
    <table tabindex="0" id="failed-operations">
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
    <table tabindex="0" id="failed-watches">
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
