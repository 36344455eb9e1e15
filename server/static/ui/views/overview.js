// The Overview: counts by connector, account and state; paused accounts; watches by status.
import { html, useEffect, useState } from "/ui/assets/htm-preact-standalone.module.js";
import { useQuery } from "../lib/api.js";
import { useLive, useRefresh, operationEvents, watchEvents } from "../lib/live.js";
import {
  STATES,
  STATUSES,
  useViewer,
  readsAll,
  link,
  time,
  Time,
  Num,
  Failure,
  allAccounts,
} from "../lib/common.js";

export function Overview() {
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
    <table tabindex="0" id="operation-counts">
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
    <table tabindex="0" id="watch-counts">
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
