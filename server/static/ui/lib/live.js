// Live updates: the page's one graphql-transport-ws client, its subscriptions and the live
// indicator; and the re-reads of what no event announces.
import { html, useEffect, useRef, useState } from "/ui/assets/htm-preact-standalone.module.js";
// graphql-ws's browser build (UMD): run as a module it defines ``globalThis.graphqlWs``.
import "/ui/assets/graphql-ws.min.js";
import { token as storedToken } from "/signin/session.js";
import { loadDocuments } from "./api.js";

// --- live updates --------------------------------------------------------------------------

export const REFRESH_MS = 400;
export const RETRY_MS = [500, 1000, 2000, 5000, 10000];

/** The page's one graphql-transport-ws client (for the token in use), and the state the live
 * indicator shows: "connecting", "live", "reconnecting" or "stopped" (``liveReason`` says
 * why); null while nothing subscribes. */
export let socket = null;
export let liveState = null;
export let liveReason = "";
export const liveListeners = new Set();
export let subscribers = 0;

export function setLive(state, reason = "") {
  liveState = state;
  liveReason = reason;
  for (const listener of liveListeners) listener(state);
}

/** Close the page's WebSocket (signed out: its token must not stay connected). */
export function closeLive() {
  socket?.client.dispose();
  socket = null;
}

export function liveClient() {
  const token = storedToken();
  if (socket?.token !== token) {
    socket?.client.dispose();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const client = globalThis.graphqlWs.createClient({
      url: `${scheme}://${location.host}/graphql`,
      connectionParams: { Authorization: `Bearer ${token}` },
      // Each subscription reconnects itself (``subscribeLive``), resuming after the last
      // event it saw; the client's own retry would resend the first ``after``.
      retryAttempts: 0,
      lazyCloseTimeout: 2000,
    });
    const mine = { token, client, connected: false };
    client.on("connected", () => {
      mine.connected = true;
      if (socket === mine && subscribers > 0) setLive("live");
    });
    client.on("closed", () => {
      mine.connected = false;
      if (socket === mine && subscribers > 0 && liveState === "live") setLive("reconnecting");
    });
    socket = mine;
  }
  return socket.client;
}

export function codesOf(error) {
  return Array.isArray(error) ? error.map((e) => e.extensions?.code) : [];
}

/**
 * Subscribe to the named subscription of dashboard.graphql, calling ``onEvent(event)`` for
 * each event, until the returned function is called. When the connection drops (or the
 * server has too many subscriptions) it reconnects, backing off, with ``after`` = the last
 * event's sequence, so the server replays what it missed; when that is older than the log
 * keeps (EVENTS_COLLECTED) it starts again at the log's end and calls ``onGap()`` (the
 * caller re-fetches). Any other error (FORBIDDEN, UNAUTHENTICATED) ends it: the indicator
 * says "not live" and why.
 */
export function subscribeLive(name, field, variables, onEvent, onGap) {
  let after = null;
  let stop = () => {};
  let timer = null;
  let failures = 0;
  let ended = false;
  const start = async () => {
    const query = (await loadDocuments()).get(name);
    if (ended || !storedToken()) return;
    let settled = false;
    const handlers = {
        next: (message) => {
          if (message.errors?.length) {
            settled = true;
            handlers.error(message.errors);
            return;
          }
          const event = message.data?.[field];
          if (!event) return;
          failures = 0;
          after = event.sequence;
          onEvent(event);
        },
        error: (error) => {
          if (ended) return;
          const codes = codesOf(error);
          if (codes.includes("EVENTS_COLLECTED")) {
            after = null;
            onGap();
            start();
            return;
          }
          if (codes.includes("UNAUTHENTICATED") && storedToken() && socket?.token !== storedToken()) {
            // The connection's token expired after the session was renewed: go on with
            // the new one, from the last event seen.
            start();
            return;
          }
          if (Array.isArray(error) && !codes.includes("TOO_MANY_SUBSCRIPTIONS")) {
            setLive("stopped", error.map((e) => e.message).join("; "));
            return;
          }
          setLive("reconnecting");
          timer = setTimeout(start, RETRY_MS[Math.min(failures, RETRY_MS.length - 1)]);
          failures += 1;
        },
        // The server ended the stream (after an error it sent, or on its own): the page
        // stops saying "live" until it is subscribed again.
        complete: () => {
          if (!ended && !settled) setLive("stopped", "the server ended the stream");
        },
    };
    stop = liveClient().subscribe(
      { query, operationName: name, variables: { ...variables, after } },
      handlers,
    );
  };
  subscribers += 1;
  if (liveState === null) setLive(socket?.connected && socket.token === storedToken() ? "live" : "connecting");
  start();
  return () => {
    ended = true;
    clearTimeout(timer);
    stop();
    subscribers -= 1;
    if (subscribers === 0) setLive(null);
  };
}

/** ``fn`` run at most once per ``ms``: a call within ``ms`` of the last run is deferred to
 * its end, and calls meanwhile fold into that one run. */
export function throttle(fn, ms) {
  let last = 0;
  let timer = null;
  const throttled = () => {
    if (timer !== null) return;
    timer = setTimeout(() => {
      timer = null;
      last = Date.now();
      fn();
    }, Math.max(0, last + ms - Date.now()));
  };
  throttled.cancel = () => clearTimeout(timer);
  return throttled;
}

/**
 * Keep a view live: while it is shown, subscribe to each ``[document, field, variables]`` of
 * ``feeds`` and call ``refresh()`` after events (at most once per ``REFRESH_MS``), and once
 * the connection is up (what was written before the subscription started). ``key`` names
 * the feeds: new feeds when it changes.
 */
export function useLive(feeds, refresh, key) {
  const latest = useRef(refresh);
  latest.current = refresh;
  useEffect(() => {
    if (!feeds.length) return;
    const refreshSoon = throttle(() => latest.current(), REFRESH_MS);
    const stops = feeds.map(([document, field, variables]) =>
      subscribeLive(document, field, variables, refreshSoon, refreshSoon),
    );
    const up = (state) => state === "live" && refreshSoon();
    liveListeners.add(up);
    return () => {
      liveListeners.delete(up);
      refreshSoon.cancel();
      for (const stop of stops) stop();
    };
  }, [key]);
}

export const REFRESH_EVERY_MS = 10_000;

/**
 * Re-read what no event announces (pauses, caps and throttles, set in another tab or
 * through the API): ``refresh()`` when the page regains the focus or becomes visible, and
 * every ``REFRESH_EVERY_MS`` while it is shown.
 */
export function useRefresh(refresh) {
  const latest = useRef(refresh);
  latest.current = refresh;
  useEffect(() => {
    const again = () => document.visibilityState === "visible" && latest.current();
    const timer = setInterval(again, REFRESH_EVERY_MS);
    addEventListener("focus", again);
    document.addEventListener("visibilitychange", again);
    return () => {
      clearInterval(timer);
      removeEventListener("focus", again);
      document.removeEventListener("visibilitychange", again);
    };
  }, []);
}

export const OPERATION_EVENTS = "DashboardOperationEvents";
export const WATCH_EVENTS = "DashboardWatchEvents";

export function operationEvents(filter = null) {
  return [OPERATION_EVENTS, "operationEvents", { filter }];
}

export function watchEvents(filter = null) {
  return [WATCH_EVENTS, "watchEvents", { filter }];
}

/** The live indicator: whether the page's subscriptions are connected. */
export function LiveIndicator() {
  const [state, setState] = useState(liveState);
  useEffect(() => {
    liveListeners.add(setState);
    setState(liveState);
    return () => liveListeners.delete(setState);
  }, []);
  if (state === null) return null;
  const text = {
    connecting: "connecting…",
    live: "live",
    reconnecting: "reconnecting…",
    stopped: "not live",
  }[state];
  const title = {
    connecting: "Connecting to the server's subscriptions",
    live: "Updates as the server writes: no reload needed",
    reconnecting: "The connection dropped: reconnecting, then catching up on what was missed",
    stopped: `The server ended the updates (${liveReason}): reload to try again`,
  }[state];
  return html`<span id="live" class=${`live live-${state}`} data-live=${state} title=${title}
    aria-live="polite">${text}</span
  >`;
}
