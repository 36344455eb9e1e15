// The dashboard at /ui: a GraphQL client like any other. Every document it sends is a named
// operation of graphql/operations/dashboard.graphql, loaded from the server; every request
// carries the user's token. No build step: Preact and htm from one vendored ES module, and
// graphql-ws (the client of graphql-transport-ws) for the subscriptions that keep a view live.
import { html, render, useEffect, useState } from "/ui/assets/htm-preact-standalone.module.js";
import {
  exchange,
  linkCode,
  signInFromAddress,
  signOut,
  useToken,
  token as storedToken,
} from "/signin/session.js";
import { run } from "./lib/api.js";
import { closeLive, LiveIndicator } from "./lib/live.js";
import {
  ViewerContext,
  NoticeContext,
  VIEWS,
  ZONES,
  ZoneContext,
  currentRoute,
  link,
  saveZone,
  savedZone,
} from "./lib/common.js";
import { Overview } from "./views/overview.js";
import { Operations } from "./views/operations.js";
import { OperationView } from "./views/operation.js";
import { WatchView } from "./views/watch.js";
import { Failures } from "./views/failures.js";
import { Watches } from "./views/watches.js";
import { Accounts } from "./views/accounts.js";

// --- the frame -----------------------------------------------------------------------------

function SignIn({ onToken, reason }) {
  const [refused, setRefused] = useState(null);
  const submit = (event) => {
    event.preventDefault();
    const given = new FormData(event.target).get("token").trim();
    if (!given) return;
    const code = linkCode(given);
    if (code === null) {
      useToken(given);
      onToken();
      return;
    }
    exchange(code).then(onToken, (error) => setRefused(error.message));
  };
  return html`
    <main>
      <h2>Sign in</h2>
      ${(refused || reason) && html`<p class="error" role="alert">${refused || reason}</p>`}
      <p>
        Open a sign-in link: <code>connector-store sign-in-link</code> prints one where the
        server runs${" "}(<code>connector-store serve</code> prints one too when it starts in a
        terminal); each works once, for a few minutes.
      </p>
      <form onSubmit=${submit}>
        <p>
          <label for="token">Or paste a sign-in link, or a bearer token (a JWT; <code>connector-store token</code> mints one)</label><br />
          <input id="token" name="token" type="password" size="60" autocomplete="off" required />
        </p>
        <button type="submit">Sign in</button>
        <p class="note">The token is kept in this tab's session storage only.</p>
      </form>
    </main>
  `;
}

const PAGES = {
  overview: Overview,
  operations: Operations,
  operation: OperationView,
  watch: WatchView,
  failures: Failures,
  watches: Watches,
  accounts: Accounts,
};

function App() {
  const [route, setRoute] = useState(currentRoute());
  const [signedIn, setSignedIn] = useState(Boolean(storedToken()));
  const [signingIn, setSigningIn] = useState(linkCode(location.hash) !== null);
  const [reason, setReason] = useState(null);
  const [viewer, setViewer] = useState({ did: null, scopes: [], mutations: [] });
  const [notice, setNotice] = useState(null);
  const [zone, setZone] = useState(savedZone());
  useEffect(() => {
    if (!signedIn) return;
    run("DashboardViewer").then(
      (data) => setViewer(data.viewer),
      () => setViewer({ did: null, scopes: [], mutations: [] }),
    );
  }, [signedIn]);
  useEffect(() => {
    signInFromAddress().then(
      (opened) => {
        setSigningIn(false);
        if (opened) {
          setReason(null);
          setRoute(currentRoute());
          setSignedIn(true);
        }
      },
      (error) => {
        setSigningIn(false);
        setRoute(currentRoute());
        setReason(error.message);
        setSignedIn(Boolean(storedToken()));
      },
    );
  }, []);
  useEffect(() => {
    const moved = () => {
      setNotice(null);
      setRoute(currentRoute());
    };
    const refused = (event) => {
      closeLive();
      setReason(event.reason || null);
      setSignedIn(false);
    };
    addEventListener("hashchange", moved);
    addEventListener("signed-out", refused);
    return () => {
      removeEventListener("hashchange", moved);
      removeEventListener("signed-out", refused);
    };
  }, []);
  const header = html`<header>
    <h1>connector-store</h1>
    <nav aria-label="Views">
      <ul>
        ${VIEWS.map(
          ([view, label]) => html`<li>
            <a href=${link(view)} aria-current=${route.view === view ? "page" : undefined}
              >${label}</a
            >
          </li>`,
        )}
      </ul>
    </nav>
    <span class="who">
      <label class="zone"
        >Times${" "}
        <select
          onChange=${(e) => {
            saveZone(e.target.value);
            setZone(e.target.value);
          }}
        >
          ${ZONES.map(([value, label]) => html`<option value=${value} selected=${value === zone}>${label}</option>`)}
        </select></label
      >${" "}
      ${signedIn && html`<${LiveIndicator} /> `}
      ${signedIn && viewer.did && html`<span class="mono">${viewer.did}</span> `}
      ${signedIn &&
      html`<button
        type="button"
        onClick=${() => {
          closeLive();
          signOut().then(() => {
            setReason(null);
            setSignedIn(false);
          });
        }}
      >
        Sign out
      </button>`}
    </span>
  </header>`;
  if (signingIn) return html`${header}<main><p role="status">Signing in…</p></main>`;
  if (!signedIn) {
    return html`${header}<${SignIn} reason=${reason} onToken=${() => {
      setReason(null);
      setSignedIn(true);
    }} />`;
  }
  const Page = PAGES[route.view] || Overview;
  return html`<${ViewerContext.Provider} value=${viewer}>
    <${ZoneContext.Provider} value=${zone}>
    <${NoticeContext.Provider} value=${setNotice}>
      ${header}
      <main>
        <p id="notice" role="status" class=${notice?.error ? "error" : "done"}>
          ${notice?.text || notice?.error?.message || ""}
        </p>
        <${Page} params=${route.params} />
      </main>
    <//>
    <//>
  <//>`;
}

const root = document.getElementById("app");
root.textContent = "";
render(html`<${App} />`, root);
