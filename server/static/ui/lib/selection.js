// Row selection on a list of operations: a checkbox per row, one for every row of the page,
// and the actions on what is selected. The bulk mutations take a filter, so an action runs
// its mutation once per selected operation, its filter naming that operation's key.
import { html, useRef, useState } from "/ui/assets/htm-preact-standalone.module.js";
import { run } from "./api.js";
import { Action, CANCEL_REASON, plural, reissued, useViewer } from "./common.js";

/** Whether the viewer may act on selected rows (cancel or reissue them): else no row is
 * selectable, and no checkbox is shown. */
export function useSelects() {
  const { mutations } = useViewer();
  return mutations.includes("cancelOperations") || mutations.includes("reissueOperations");
}

const keyOf = (op) => `${op.callerDID}\n${op.operationID}`;

/** The operations selected, kept until ``scope`` changes (another filter or page):
 * ``{ has(op), toggle(op), every(rows, on), picked(rows), clear() }``. ``picked`` answers the
 * selected ones among ``rows``, as they are now. */
export function useSelection(scope) {
  const [chosen, setChosen] = useState(() => new Set());
  const shown = useRef(scope);
  let current = chosen;
  if (shown.current !== scope) {
    shown.current = scope;
    current = new Set();
    setChosen(current);
  }
  const change = (edit) =>
    setChosen((before) => {
      const next = new Set(before);
      edit(next);
      return next;
    });
  return {
    has: (op) => current.has(keyOf(op)),
    toggle: (op) => change((next) => (next.has(keyOf(op)) ? next.delete(keyOf(op)) : next.add(keyOf(op)))),
    every: (rows, on) => change((next) => rows.forEach((op) => (on ? next.add(keyOf(op)) : next.delete(keyOf(op))))),
    picked: (rows) => rows.filter((op) => current.has(keyOf(op))),
    clear: () => setChosen(new Set()),
  };
}

/** The header cell selecting every row of the page. */
export function SelectAll({ rows, selection }) {
  if (!useSelects()) return null;
  const all = rows.length > 0 && selection.picked(rows).length === rows.length;
  return html`<th scope="col" class="select">
    <label
      ><input
        type="checkbox"
        data-select-all
        checked=${all}
        disabled=${rows.length === 0}
        onChange=${(e) => selection.every(rows, e.target.checked)}
      />${" "}All</label
    >
  </th>`;
}

/** The cell selecting one row; an empty cell for a row that cannot be selected (``none``). */
export function SelectRow({ op, selection, none = false }) {
  if (!useSelects()) return null;
  if (none) return html`<td class="select"></td>`;
  return html`<td class="select">
    <input
      type="checkbox"
      aria-label=${`Select ${op.operationID}`}
      checked=${selection.has(op)}
      onChange=${() => selection.toggle(op)}
    />
  </td>`;
}

/** Each selected operation's key as a filter in ``state``. */
const only = (op, state) => ({ callerDID: op.callerDID, operationID: op.operationID, states: [state] });

/** Run ``document`` once per operation of ``ops``, one after another; the answers. */
async function each(ops, document, inputOf) {
  const answers = [];
  for (const op of ops) answers.push(await run(document, { input: inputOf(op) }));
  return answers;
}

/** What the selection may have done to it: cancel the selected ATTEMPTED operations, reissue
 * the selected FAILED ones never reissued (rows without ``reissuedAs`` are asked about and
 * skipped by the API when they were). Each asks first, saying what it touches and risks. */
export function SelectedActions({ rows, selection, after, reason = CANCEL_REASON }) {
  if (!useSelects()) return null;
  const picked = selection.picked(rows);
  const live = picked.filter((op) => op.state === "ATTEMPTED");
  const failed = picked.filter((op) => op.state === "FAILED" && !op.reissuedAs);
  const marked = live.filter((op) => op.sendMarker).length;
  const done = () => {
    selection.clear();
    after();
  };
  return html`<p class="actions selection" data-selected=${picked.length}>
    <span role="status">${picked.length ? `${plural(picked.length, "operation")} selected.` : "None selected."}</span>
    ${live.length > 0 &&
    html`<${Action}
      field="cancelOperations"
      label=${`Cancel ${plural(live.length, "selected ATTEMPTED operation")}`}
      rows=${live.length}
      risk=${`Their holders' runs are refused from now on.${marked
        ? ` ${marked} of them ${marked === 1 ? "has" : "have"} a marked send: the provider may already hold the write, and a reissue would send it again.`
        : ""}`}
      perform=${() =>
        each(live, "DashboardCancelOperations", (op) => ({
          filter: only(op, "ATTEMPTED"),
          reason,
        })).then((answers) => ({
          cancelled: answers.reduce((n, d) => n + d.cancelOperations.cancelled, 0),
        }))}
      done=${(d) => `Cancelled ${plural(d.cancelled, "operation")}.`}
      after=${done}
    />`}
    ${failed.length > 0 &&
    html`<${Action}
      field="reissueOperations"
      label=${`Reissue ${plural(failed.length, "selected FAILED operation")}`}
      rows=${failed.length}
      perform=${() =>
        each(failed, "DashboardReissueOperations", (op) => ({ filter: only(op, "FAILED") })).then(
          (answers) => ({
            operations: answers.flatMap((d) => d.reissueOperations.operations),
            skipped: Object.fromEntries(
              ["cancelled", "outcomeUnknown", "blocked"].map((why) => [
                why,
                answers.reduce((n, d) => n + d.reissueOperations.skipped[why], 0),
              ]),
            ),
            remaining: 0,
          }),
        )}
      done=${reissued}
      after=${done}
    />`}
  </p>`;
}
