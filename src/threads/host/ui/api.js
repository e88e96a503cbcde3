// The console's only way to the host: the /v1 API, called with the viewer's bearer token.
// The token comes from "#token=..." in the address (a fragment never reaches any server, and
// it is taken out of the address at once) or from the token form; it is kept in this tab's
// sessionStorage and sent nowhere but the Authorization header of requests to this host.
"use strict";

const KEY = "threads.token";

function takeToken() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(KEY, decodeURIComponent(match[1]));
    const rest = location.hash.replace(match[0], "").replace(/^#&?/, "");
    history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
  }
  return sessionStorage.getItem(KEY) || "";
}

let token = takeToken();

export function hasToken() { return token !== ""; }

export function setToken(value) {
  token = value.trim();
  sessionStorage.setItem(KEY, token);
}

export function authorization() { return { authorization: "Bearer " + token }; }

// A refusal of the host: its coded error ({"error": {"code", "message"}}) and the status.
class Refused extends Error {
  constructor(status, code, message) {
    super(code + ": " + message);
    this.status = status;
    this.code = code;
    this.detail = message;
  }
}

// Calls the API; answers {status, data, next} (next: the next page's path, from Link), or
// throws Refused (a network failure is the code "unreachable").
export async function api(method, path, body, headers) {
  const sent = { ...authorization(), ...(headers || {}) };
  if (body !== undefined) sent["content-type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method, headers: sent, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer",
    });
  } catch (error) {
    throw new Refused(0, "unreachable", "the host did not answer");
  }
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || { code: "http_" + response.status, message: "" };
    throw new Refused(response.status, String(error.code), String(error.message || ""));
  }
  return { status: response.status, data, next: nextLink(response.headers.get("link")) };
}

function nextLink(header) {
  const match = header && /<([^>]+)>\s*;\s*rel="next"/.exec(header);
  return match && match[1].startsWith("/v1/") ? match[1] : null;
}

// What each code of the host means to the person who just acted.
const WORDS = {
  unauthenticated: "The host does not know this token. Give your token again.",
  forbidden: "You may not make this decision on this thread.",
  not_found: "The host has no such thing for you: it is gone, or it is not yours to see.",
  invalid_request: "The host refused the request as malformed.",
  invalid_cursor: "This page of the list is out of date: start from the first page.",
  approval_expired: "This approval request expired; it counts as denied.",
  approval_duplicate: "This approval was already decided.",
  approval_mismatch: "The request changed since you saw it; look at it again.",
  not_parked: "That effect is not parked any more: someone resolved it already.",
  not_pending: "There is nothing of that kind waiting on this thread now.",
  no_open_question: "That question is not waiting for an answer any more.",
  invalid_answer: "That is not an answer this question takes.",
  holder_may_be_running: "An earlier run of this thread may still be sending this call, so sending it again is refused for now.",
  branch_busy: "Another process is running this thread right now; try again once it stops.",
  branch_not_runnable: "This thread can't take a new message now (it waits for a decision, or it can't run).",
  idempotency_key_reused: "This message was already sent with other content.",
  sandbox_required: "Forking needs an agent with a sandbox that can restore snapshots.",
  no_snapshot_boundary: "There is no snapshot to fork at there.",
  snapshot_expired: "That snapshot expired; it can't be restored any more.",
  snapshot_missing: "That snapshot is gone from its provider.",
  payload_too_large: "That is more than the host takes in one request.",
  log_corrupt: "The thread's stored log is damaged; export it and check it with threads verify.",
  internal: "The host failed; try again later.",
  unreachable: "The host could not be reached.",
};

export function inWords(error) {
  if (!(error instanceof Refused)) return { code: "error", words: String(error), detail: "" };
  return { code: error.code, words: WORDS[error.code] || "The host refused it.", detail: error.detail };
}
