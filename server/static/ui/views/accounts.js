// Accounts: caps, throttles and pauses of every provider account.
import { html, useEffect, useState } from "/ui/assets/htm-preact-standalone.module.js";
import { useLive, useRefresh, operationEvents } from "../lib/live.js";
import {
  Action,
  Time,
  Failure,
  allAccounts,
  useViewer,
  throttled,
  ThrottleBadge,
  LiftThrottle,
} from "../lib/common.js";

/** The most seconds a throttle may last (the API's 86,400,000 ms). */
export const THROTTLE_MAX_S = 86400;

/** The account's cap, editable where the token may (setAccountLimit): empty for none. */
function Limit({ account, after }) {
  const viewer = useViewer();
  const [cap, setCap] = useState(account.maxInFlight === null ? "" : String(account.maxInFlight));
  if (!viewer.mutations.includes("setAccountLimit")) return null;
  const name = `${account.connectorName} / ${account.accountKey}`;
  return html`<span class="action-group">
    <input
      type="number"
      min="0"
      class="short"
      aria-label=${`Cap of ${name} (empty: none)`}
      value=${cap}
      onInput=${(e) => setCap(e.target.value)}
    />
    <${Action}
      field="setAccountLimit"
      document="DashboardSetAccountLimit"
      label="Set cap"
      input=${{
        connectorName: account.connectorName,
        accountKey: account.accountKey,
        maxInFlight: cap === "" ? null : Number(cap),
      }}
      done=${(d) => {
        const set = d.setAccountLimit.account.maxInFlight;
        return `${name}: cap ${set === null ? "none" : set}.`;
      }}
      after=${after}
    />
  </span>`;
}

/** Why ``seconds`` (as typed) is no throttle's length, or null when it is one: a whole
 * number of seconds from 1 to ``THROTTLE_MAX_S``. */
export function refusal(seconds) {
  const n = Number(seconds);
  if (seconds.trim() === "" || !Number.isInteger(n) || n < 1 || n > THROTTLE_MAX_S) {
    return `a whole number of seconds from 1 to ${THROTTLE_MAX_S} (24 hours).`;
  }
  return null;
}

/** Lease nothing of the account for a number of seconds, where the token may
 * (throttleAccount). */
function Throttle({ account, after }) {
  const viewer = useViewer();
  const [seconds, setSeconds] = useState("60");
  if (!viewer.mutations.includes("throttleAccount")) return null;
  const name = `${account.connectorName} / ${account.accountKey}`;
  return html`<span class="action-group">
    <input
      type="number"
      min="1"
      max=${THROTTLE_MAX_S}
      step="1"
      required
      class="short"
      aria-label=${`Throttle ${name} for (seconds)`}
      aria-invalid=${refusal(seconds) ? "true" : undefined}
      value=${seconds}
      onInput=${(e) => setSeconds(e.target.value)}
    />
    <${Action}
      field="throttleAccount"
      document="DashboardThrottleAccount"
      label="Throttle"
      input=${{
        connectorName: account.connectorName,
        accountKey: account.accountKey,
        retryAfterMs: Number(seconds) * 1000,
      }}
      check=${() => (refusal(seconds) ? `Throttle ${name} for: ${refusal(seconds)}` : null)}
      done=${() => `${name} is throttled for ${seconds} s.`}
      after=${after}
    />
  </span>`;
}

export function Accounts() {
  const viewer = useViewer();
  const [state, setState] = useState({ data: null, error: null });
  const [round, setRound] = useState(0);
  const [spread, setSpread] = useState("0");
  const reload = () => setRound((n) => n + 1);
  useLive([operationEvents()], reload, "accounts");
  useRefresh(reload);
  useEffect(() => {
    allAccounts().then(
      (data) => setState({ data, error: null }),
      (error) => setState({ data: null, error }),
    );
  }, [round]);
  if (state.error) return html`<h2>Accounts</h2><${Failure} error=${state.error} />`;
  if (!state.data) return html`<p aria-busy="true">Loading…</p>`;
  const now = state.data.serverTime;
  const spreadMs = Math.max(0, Math.round(Number(spread) * 1000) || 0);
  const said = (verb) => (d) => {
    const p = d[`${verb}Account`];
    return p.account
      ? `${p.connectorName} / ${p.account.accountKey} is ${p.account.paused ? "paused" : "leased again"}.`
      : `Connector ${p.connectorName} is ${p.connectorPaused ? "paused" : "leased again"}.`;
  };
  return html`
    <h2>Accounts</h2>
    ${viewer.mutations.includes("resumeAccount") &&
    html`<p>
      <label
        >Resume spreads the account's due backlog over (seconds)${" "}
        <input type="number" min="0" max="86400" value=${spread} onInput=${(e) => setSpread(e.target.value)}
      /></label>
    </p>`}
    <p class="actions">
      ${state.data.connectors.map(({ connectorName, pausedAt }) => {
        const mine = state.data.accounts.filter((a) => a.connectorName === connectorName);
        const whole = pausedAt !== null;
        return whole
          ? html`<${Action}
              field="resumeAccount"
              document="DashboardResumeAccount"
              label=${`Resume connector ${connectorName}`}
              input=${{ connectorName, spreadMs }}
              rows=${mine.length}
              done=${said("resume")}
              after=${reload}
            />`
          : html`<${Action}
              field="pauseAccount"
              document="DashboardPauseAccount"
              label=${`Pause connector ${connectorName}`}
              input=${{ connectorName }}
              rows=${mine.length}
              done=${said("pause")}
              after=${reload}
            />`;
      })}
    </p>
    <table tabindex="0" id="accounts">
      <caption>Provider accounts: caps and throttles</caption>
      <thead>
        <tr>
          <th scope="col">Connector</th>
          <th scope="col">Account</th>
          <th scope="col" class="num">In flight</th>
          <th scope="col" class="num">Cap</th>
          <th scope="col">Throttled until</th>
          <th scope="col">Paused</th>
          <th scope="col">Action</th>
        </tr>
      </thead>
      <tbody>
        ${state.data.accounts.length === 0 && html`<tr><td colspan="7">No accounts.</td></tr>`}
        ${state.data.accounts.map(
          (a) => html`<tr data-account=${`${a.connectorName}/${a.accountKey}`}>
            <th scope="row">${a.connectorName}</th>
            <td>${a.accountKey}</td>
            <td class="num">${a.inFlight}</td>
            <td class="num" data-cap>
              ${a.maxInFlight ?? html`<span class="note">none</span>`}
              <${Limit} account=${a} after=${reload} />
            </td>
            <td data-throttle>
              ${throttled(a, now)
                ? html`<${ThrottleBadge} account=${a} now=${now} /> <${LiftThrottle} account=${a} after=${reload} />`
                : html`<span class="note">not throttled</span>`}
              <${Throttle} account=${a} after=${reload} />
            </td>
            <td data-paused-state>
              ${a.pausedAt !== null
                ? html`since <${Time} ms=${a.pausedAt} />`
                : a.paused
                  ? "with its connector"
                  : html`<span class="note">no</span>`}
            </td>
            <td>
              ${a.pausedAt !== null
                ? html`<${Action}
                    field="resumeAccount"
                    document="DashboardResumeAccount"
                    label="Resume"
                    input=${{ connectorName: a.connectorName, accountKey: a.accountKey, spreadMs }}
                    done=${said("resume")}
                    after=${reload}
                  />`
                : html`<${Action}
                    field="pauseAccount"
                    document="DashboardPauseAccount"
                    label="Pause"
                    input=${{ connectorName: a.connectorName, accountKey: a.accountKey }}
                    risk=${`Nothing of ${a.connectorName} / ${a.accountKey} is leased until it is resumed; leases held run on.`}
                    done=${said("pause")}
                    after=${reload}
                  />`}
            </td>
          </tr>`,
        )}
      </tbody>
    </table>
  `;
}
