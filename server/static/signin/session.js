// Signing in, for the dashboard (/ui) and GraphiQL (/graphql) alike. A sign-in link
// (`connector-store sign-in-link` prints one; `serve` too, in a development server's
// terminal) carries a one-time code in its fragment (#sign-in=<code>), which browsers
// never send to a server; the page POSTs it to /auth/sign-in and keeps the session's token
// in this tab's sessionStorage (no cookie: another site's page cannot use it), renews it at
// half its life while the page is open, and revokes it on sign-out. A token typed in (a JWT of
// `connector-store token` or an identity provider) is kept the same way, but is no session:
// nothing to renew or revoke.

const KEY = "connector-store-session";
const FRAGMENT = "#sign-in=";
const RETRY_MS = 10_000;

let timer = null;

function stored() {
  try {
    return JSON.parse(sessionStorage.getItem(KEY)) || null;
  } catch {
    return null;
  }
}

function keep(value) {
  if (value) sessionStorage.setItem(KEY, JSON.stringify(value));
  else sessionStorage.removeItem(KEY);
  dispatchEvent(new Event("session-changed"));
}

/** The bearer token in use, or null. */
export function token() {
  return stored()?.token || null;
}

/** Who is signed in: { sub, scope, session } (session: a renewable session's token), or null. */
export function signedIn() {
  const value = stored();
  return value ? { sub: value.sub || null, scope: value.scope || null, session: Boolean(value.session) } : null;
}

/** Forget the token (a refused one) and say why: a "signed-out" event with ``reason``. */
export function forget(reason) {
  clearTimeout(timer);
  keep(null);
  dispatchEvent(Object.assign(new Event("signed-out"), { reason: reason || "" }));
}

async function post(path, body, bearer) {
  const headers = { "Content-Type": "application/json" };
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const response = await fetch(path, { method: "POST", headers, body: JSON.stringify(body), cache: "no-store" });
  const answer = await response.json().catch(() => ({}));
  return { status: response.status, answer };
}

function opened(answer) {
  keep({
    token: answer.token,
    sub: answer.sub,
    scope: answer.scope,
    session: true,
    renewAt: Date.now() + (answer.expiresIn * 1000) / 2,
  });
  schedule();
}

function schedule() {
  clearTimeout(timer);
  const value = stored();
  if (!value?.session) return;
  timer = setTimeout(renew, Math.max(0, value.renewAt - Date.now()));
}

async function renew() {
  const value = stored();
  if (!value?.session) return;
  let result;
  try {
    result = await post("/auth/renew", {}, value.token);
  } catch {
    timer = setTimeout(renew, RETRY_MS);
    return;
  }
  if (token() !== value.token) return;
  if (result.status === 200) opened(result.answer);
  else if (result.status === 401) forget(result.answer.errors?.[0]?.message || "the session has ended");
  else timer = setTimeout(renew, RETRY_MS);
}

/** The code of a sign-in link (its whole text, or only its fragment), or null. */
export function linkCode(text) {
  const at = text.indexOf(FRAGMENT);
  return at < 0 ? null : text.slice(at + FRAGMENT.length).trim() || null;
}

/** Exchange ``code`` for a session's token; resolves true, or rejects with the server's
 * reason (used, expired, unknown). */
export async function exchange(code) {
  const { status, answer } = await post("/auth/sign-in", { code });
  if (status !== 200) throw new Error(answer.errors?.[0]?.message || `sign-in refused (HTTP ${status})`);
  opened(answer);
  return true;
}

/**
 * The page was opened by a sign-in link: take the code out of the address at once (it never
 * stays in the history), then exchange it. Resolves false when there was none, true once
 * signed in; rejects with the reason a code was refused.
 */
export async function signInFromAddress() {
  const code = linkCode(location.hash);
  if (code === null) return false;
  history.replaceState(null, "", location.pathname + location.search);
  return exchange(code);
}

/** Use a token typed in (not a session: never renewed, never revoked here). */
export function useToken(typed) {
  clearTimeout(timer);
  keep({ token: typed, session: false });
}

/** Sign out: revoke the session on the server (every tab and process refuses its token
 * from then on), and forget the token in this tab whatever the server answered. */
export async function signOut() {
  const value = stored();
  clearTimeout(timer);
  keep(null);
  if (value?.session) {
    try {
      await post("/auth/sign-out", {}, value.token);
    } catch {
      // The tab has forgotten it; the session ends by itself at its expiry.
    }
  }
}

schedule();
