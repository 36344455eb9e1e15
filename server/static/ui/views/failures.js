// Failures: FAILED operations grouped by kind and message, the FAILED operations and the
// REPAIR_FAILED watches, with their actions.
import { html, useEffect, useRef, useState } from "/ui/assets/htm-preact-standalone.module.js";
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
  Reissue,
  RiskBadge,
  useViewer,
} from "../lib/common.js";
import { SelectAll, SelectRow, SelectedActions, useSelection } from "../lib/selection.js";

/** The most groups the view shows (the API's failureGroups answers up to 500). */
export const GROUPS = 100;

/** The operations filter of a group: its kind and message. A filter cannot ask for no kind or
 * no message, so a group without one names only the other: the operations shown are then
 * narrowed here to those without it, and such a group offers no reissue of its own (the
 * filter would reach other groups' operations too). */
export function groupFilter(group) {
  const filter = { states: ["FAILED"] };
  if (group.kind !== null) filter.kind = group.kind;
  if (group.message !== null) filter.lastError = group.message;
  return filter;
}

/** A group's operations (the first page), each selectable; re-read when ``version`` (the
 * view's data) changes. */
function GroupOperations({ group, version }) {
  const filter = groupFilter(group);
  const key = JSON.stringify(filter);
  const [data, error, reload] = useQuery("DashboardFailureGroupOperations", { filter, first: PAGE_SIZE }, key);
  const first = useRef(version);
  useEffect(() => {
    if (first.current !== version) reload();
  }, [version]);
  const selection = useSelection(key);
  if (error) return html`<${Failure} error=${error} />`;
  if (!data) return html`<p aria-busy="true">Loading…</p>`;
  const rows = data.operations.edges
    .map((e) => e.node)
    .filter(
      (op) => (group.kind !== null || op.lastKind === null) && (group.message !== null || op.lastError === null),
    );
  return html`<${SelectedActions} rows=${rows} selection=${selection} after=${reload} />
    <table tabindex="0" class="group-operations">
      <caption>
        Its operations${data.operations.pageInfo.hasNextPage ? ` (the first ${PAGE_SIZE})` : ""}
      </caption>
      <thead>
        <tr>
          <${SelectAll} rows=${rows} selection=${selection} />
          <th scope="col">Operation</th>
          <th scope="col">Caller</th>
          <th scope="col">Connector</th>
          <th scope="col">Account</th>
          <th scope="col" class="num">Attempts</th>
          <th scope="col">Last updated</th>
          <th scope="col">Reissued as</th>
        </tr>
      </thead>
      <tbody>
        ${rows.map(
          (op) => html`<tr data-operation=${op.operationID}>
            <${SelectRow} op=${op} selection=${selection} />
            <td><a href=${operationLink(op)}>${op.operationID}</a> <${RiskBadge} op=${op} /></td>
            <td class="mono">${op.callerDID}</td>
            <td>${op.connectorName}</td>
            <td>${op.accountKey}</td>
            <td class="num">${op.attempts}</td>
            <td><${Time} ms=${op.updatedAt} /></td>
            <td>
              ${op.reissuedAs
                ? html`<a href=${operationLink(op.reissuedAs)}>${op.reissuedAs.operationID}</a>`
                : html`<span class="note">not reissued</span>`}
            </td>
          </tr>`,
        )}
      </tbody>
    </table>`;
}

/** What a group's reissue may include besides the default (``ReissueRisk``): operations the
 * provider may already hold. */
export const RISKS = [
  ["CANCELLED", "cancelled ones"],
  ["OUTCOME_UNKNOWN", "those whose marked send has no answer"],
];

/** The FAILED operations by kind and message, largest group first: each with its counts, a
 * button showing its operations, and the reissue of the group (asking first, with the exact
 * number it would reissue, including the risks chosen above the table). */
function FailureGroups({ groups, version, after }) {
  const [open, setOpen] = useState(() => new Set());
  const [include, setInclude] = useState([]);
  const choose = (risk, on) =>
    setInclude((before) => RISKS.map(([r]) => r).filter((r) => (r === risk ? on : before.includes(r))));
  const toggle = (n) =>
    setOpen((before) => {
      const next = new Set(before);
      if (next.has(n)) next.delete(n);
      else next.add(n);
      return next;
    });
  const viewer = useViewer();
  return html`${viewer.mutations.includes("reissueOperations") && html`<fieldset class="risks">
      <legend>A group's reissue also reissues (the provider may already hold these writes)</legend>
      ${RISKS.map(
        ([risk, label]) => html`<label
          ><input
            type="checkbox"
            name="include"
            value=${risk}
            checked=${include.includes(risk)}
            onChange=${(e) => choose(risk, e.target.checked)}
          />${" "}${label}</label
        >${" "}`,
      )}
    </fieldset>`}
    <table tabindex="0" id="failure-groups">
    <caption>FAILED operations by kind and message (largest group first)</caption>
    <thead>
      <tr>
        <th scope="col">Kind</th>
        <th scope="col">Message</th>
        <th scope="col" class="num">Operations</th>
        <th scope="col" class="num">Never reissued</th>
        <th scope="col">Latest</th>
        <th scope="col">Actions</th>
      </tr>
    </thead>
    <tbody>
      ${groups.length === 0 && html`<tr><td colspan="6">No failed operations.</td></tr>`}
      ${groups.map((group, n) => {
        const filter = groupFilter(group);
        const shown = open.has(n);
        return html`<tr data-group=${n} data-kind=${group.kind}>
            <td>${group.kind ?? html`<span class="note">none</span>`}</td>
            <td data-message>${group.message ?? html`<span class="note">no message</span>`}</td>
            <td class="num" data-count>${group.count}</td>
            <td class="num">${group.unreissued}</td>
            <td><${Time} ms=${group.lastAt} /></td>
            <td>
              <span class="actions">
                <button
                  type="button"
                  aria-expanded=${shown ? "true" : "false"}
                  aria-controls=${`group-${n}`}
                  onClick=${() => toggle(n)}
                >
                  ${shown ? "Hide" : "Show"} its operations
                </button>
                ${group.unreissued > 0 &&
                group.kind !== null &&
                group.message !== null &&
                html`<${Action}
                  field="reissueOperations"
                  document="DashboardReissueOperations"
                  label="Reissue this group"
                  input=${{ filter, include }}
                  count=${countReissuable(filter, include)}
                  risk=${include.length
                    ? "It reissues operations the provider may already hold: their writes may be sent twice."
                    : undefined}
                  bulk
                  done=${(d) => reissued(d.reissueOperations)}
                  after=${after}
                />`}
              </span>
            </td>
          </tr>
          ${shown &&
          html`<tr id=${`group-${n}`} class="group-detail">
            <td colspan="6"><${GroupOperations} group=${group} version=${version} /></td>
          </tr>`}`;
      })}
    </tbody>
  </table>`;
}

export function Failures() {
  const [data, error, reload] = useQuery(
    "DashboardFailures",
    { first: PAGE_SIZE, groups: GROUPS },
    "failures",
  );
  useLive([operationEvents(), watchEvents()], reload, "failures");
  const selection = useSelection("failures");
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
        bulk
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
        bulk
        done=${(d) =>
          `Re-armed ${plural(d.rearmWatches.rearmed, "watch", "watches")}.` +
          left(d.rearmWatches.remaining)}
        after=${reload}
      />`}
    </p>
    <${FailureGroups} groups=${data.failureGroups} version=${data} after=${reload} />
    <${SelectedActions} rows=${unissued} selection=${selection} after=${reload} />
    <table tabindex="0" id="failed-operations">
      <caption>FAILED operations (newest first${data.operations.pageInfo.hasNextPage
        ? html`; <a href=${link("operations", { state: "FAILED", order: "newest" })}>all of them</a>`
        : ""})</caption>
      <thead>
        <tr>
          <${SelectAll} rows=${unissued} selection=${selection} />
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
        ${operations.length === 0 && html`<tr><td colspan="10">No failed operations.</td></tr>`}
        ${operations.map(
          (op) => html`<tr data-operation=${op.operationID}>
            <${SelectRow} op=${op} selection=${selection} none=${Boolean(op.reissuedAs)} />
            <td><a href=${operationLink(op)}>${op.operationID}</a></td>
            <td class="mono">${op.callerDID}</td>
            <td>${op.connectorName}</td>
            <td>${op.accountKey}</td>
            <td class="num">${op.attempts}</td>
            <td>
              ${[op.lastKind, op.lastHttpStatus].filter((v) => v !== null).join(" ")}${" "}<${RiskBadge} op=${op} />
            </td>
            <td data-last-error>${op.lastError}</td>
            <td><${Time} ms=${op.updatedAt} /></td>
            <td>
              ${op.reissuedAs
                ? html`<a href=${operationLink(op.reissuedAs)}>${op.reissuedAs.operationID}</a>`
                : html`<${Reissue} op=${op} after=${reload} />`}
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
