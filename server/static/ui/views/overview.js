// The Overview: charts of the operations over time; counts by connector, account and state;
// paused accounts; watches by status.
import { html, useContext, useEffect, useState } from "/ui/assets/htm-preact-standalone.module.js";
import { useQuery } from "../lib/api.js";
import { BarChart, RateChart, percent } from "../lib/chart.js";
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
  ZoneContext,
  throttled,
  ThrottleBadge,
  LiftThrottle,
} from "../lib/common.js";

const MINUTE = 60_000;
/** The ranges the charts offer: [name, label, bucket length, buckets]. */
export const RANGES = [
  ["hour", "Last hour, by minute", MINUTE, 60],
  ["day", "Last 24 hours, by 15 minutes", 15 * MINUTE, 96],
  ["week", "Last 7 days, by hour", 60 * MINUTE, 168],
];

/** The window of ``range`` ending with the bucket that holds now: whole buckets. */
export function windowOf(range, now = Date.now()) {
  const [, , bucketMs, count] = RANGES.find(([name]) => name === range);
  const until = (Math.floor(now / bucketMs) + 1) * bucketMs;
  return { since: until - count * bucketMs, until, bucketMs };
}

/** Throughput and failure rate over the chosen range (``operationStats``), re-read with the
 * counts (``round``). The window ends at the server's now (``skew``: the server's clock less
 * the browser's, ms), as the events' times are the server's. */
function Charts({ round, time, skew }) {
  const [range, setRange] = useState("hour");
  const [stats, error, reload] = useQuery(
    "DashboardOperationStats",
    windowOf(range, Date.now() + skew),
    range,
  );
  useEffect(() => {
    if (round) reload();
  }, [round]);
  const label = RANGES.find(([name]) => name === range)[1];
  const buckets = stats ? stats.operationStats : [];
  const sum = (name) => buckets.reduce((total, b) => total + b[name], 0);
  const committed = sum("committed");
  const failed = sum("failed");
  const from = buckets.length ? time(buckets[0].start) : "";
  const to = buckets.length ? time(buckets[buckets.length - 1].end) : "";
  return html`<section aria-labelledby="charts-heading" class="charts">
    <h3 id="charts-heading">Over time</h3>
    <label
      >Range
      <select value=${range} onChange=${(event) => setRange(event.target.value)}>
        ${RANGES.map(([name, text]) => html`<option value=${name}>${text}</option>`)}
      </select>
    </label>
    <${Failure} error=${error} />
    ${!stats && !error && html`<p aria-busy="true">Counting…</p>`}
    ${stats &&
    html`<div class="chart-pair">
      <${BarChart}
        id="throughput-chart"
        title=${`Throughput: operations committed and failed per bucket (${label})`}
        summary=${`${label}: ${committed} committed, ${failed} failed, ${sum("retried")} retried, ` +
        `${sum("claimed")} claimed.`}
        buckets=${buckets}
        series=${[
          ["committed", "committed"],
          ["failed", "failed"],
        ]}
        from=${from}
        to=${to}
      />
      <${RateChart}
        id="failure-rate-chart"
        title=${`Failure rate: failed of those finished per bucket (${label})`}
        summary=${committed + failed
          ? `${label}: ${percent(failed / (committed + failed))} of ${committed + failed} finished failed.`
          : `${label}: none finished.`}
        buckets=${buckets.map((b) => ({ start: b.start, rate: b.failureRate }))}
        from=${from}
        to=${to}
      />
    </div>`}
  </section>`;
}

/** A count of the live operations of an account that stand as ``run`` says, linked to them
 * in the operations list. */
function Linked({ value, label, row, run }) {
  const to = link("operations", { state: "ATTEMPTED", run, connector: row.connectorName, account: row.accountKey });
  return html`<td class=${value ? "num" : "num zero"} data-count=${label}>
    ${value ? html`<a href=${to}>${value}</a>` : 0}
  </td>`;
}

export function Overview() {
  const viewer = useViewer();
  const zone = useContext(ZoneContext);
  const [data, error, reloadCounts] = useQuery("DashboardOverview", {}, "overview");
  const [paused, setPaused] = useState(null);
  const [round, setRound] = useState(0);
  const [skew, setSkew] = useState(null);
  useEffect(() => {
    if (data) setSkew(data.serverTime - Date.now());
  }, [data]);
  const reload = () => {
    reloadCounts();
    setRound((n) => n + 1);
  };
  useLive([operationEvents(), watchEvents()], reload, "overview");
  useRefresh(reload);
  useEffect(() => {
    if (!readsAll(viewer)) return;
    allAccounts().then(
      ({ serverTime, accounts, connectors }) =>
        setPaused({
          now: serverTime,
          paused: [
            ...connectors
              .filter((c) => c.pausedAt !== null && !accounts.some((a) => a.connectorName === c.connectorName))
              .map((c) => ({ connectorName: c.connectorName, accountKey: "(every account)", pausedAt: c.pausedAt })),
            ...accounts.filter((a) => a.paused),
          ],
          throttled: accounts.filter((a) => throttled(a, serverTime)),
        }),
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
    ${skew !== null && html`<${Charts} round=${round} time=${(ms) => time(ms, zone)} skew=${skew} />`}
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
          const held = paused?.throttled.find(
            (a) => a.connectorName === row.connectorName && a.accountKey === row.accountKey,
          );
          return html`<tr>
            <th scope="row">${row.connectorName}</th>
            <td>${row.accountKey}${held && html` <${ThrottleBadge} account=${held} now=${paused.now} />`}</td>
            <${Linked} value=${row.due} label=${`${at}/due`} row=${row} run="DUE" />
            <${Linked} value=${row.inFlight} label=${`${at}/inFlight`} row=${row} run="LEASED" />
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
      <h3 id="paused-heading">Paused or throttled accounts</h3>
      ${paused.paused.length === 0 && paused.throttled.length === 0
        ? html`<p id="paused-accounts">None: every account is leased as usual.</p>`
        : html`<ul id="paused-accounts">
            ${paused.throttled.map(
              (a) => html`<li data-throttled=${`${a.connectorName}/${a.accountKey}`}>
                ${a.connectorName} / ${a.accountKey}${" "}<${ThrottleBadge} account=${a} now=${paused.now} />${" "}
                <${LiftThrottle} account=${a} after=${reload} />
              </li>`,
            )}
            ${paused.paused.map(
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
