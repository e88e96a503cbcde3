// One thread (one branch of it): its conversation followed live over the host's event stream
// (whoever runs it), what waits for a decision, and the actions the host supports: decide,
// cancel, send a message, fork at a snapshot. The overview (status, spend, model calls,
// decisions) is read again after events arrive, one read at a time.
"use strict";

import { api } from "./api.js";
import { Conversation } from "./conversation.js";
import { Decisions } from "./decisions.js";
import { badge, costText, el, notice, pageLink, refusalNode, shortId, threadPath, timeEl, tokenForm } from "./dom.js";
import { follow } from "./stream.js";

function lastSegment() {
  try { return decodeURIComponent(location.pathname.split("/").pop()); } catch (error) { return ""; }
}

const threadId = lastSegment();
const branchId = new URLSearchParams(location.search).get("branch");
const base = "/v1/threads/" + encodeURIComponent(threadId);
const onBranch = (path) => base + path + (branchId ? (path.includes("?") ? "&" : "?") + "branch_id=" + encodeURIComponent(branchId) : "");

let overview = null;
let reading = false;
let again = false;

const conversation = new Conversation(document.getElementById("conversation"),
  document.querySelector("#raw tbody"), forkAt);
const decisions = new Decisions(document.getElementById("pending"), onBranch, refresh);

function said(node) { document.getElementById("action-result").replaceChildren(node); }

// ---- the overview ------------------------------------------------------------------------

async function refresh() {
  if (reading) { again = true; return; }
  reading = true;
  try {
    do {
      again = false;
      try {
        overview = (await api("GET", onBranch("/overview"))).data;
      } catch (error) { notice("", error); return; }
      notice("");
      showFacts(overview);
      conversation.annotate(overview);
      decisions.show(overview.waiting);
      if (location.hash.startsWith("#item-")) {
        const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
        if (target && !target.dataset.shown) { target.dataset.shown = "1"; target.focus(); }
      }
    } while (again);
  } finally { reading = false; }
}

const count = (n, what) => n + " " + what + (n === 1 ? "" : "s");

function showFacts(o) {
  const facts = document.getElementById("facts");
  const pair = (term, ...value) => [el("div", {}, el("dt", {}, term), el("dd", {}, ...value))];
  const u = o.usage;
  facts.replaceChildren(
    ...pair("status", badge(o.status)), ...pair("agent", o.agent || "none", o.served ? "" : " (not served by this host)"),
    ...pair("updated", timeEl(o.updated_at)), ...pair("started", timeEl(o.created_at)),
    ...pair("cost", costText(o.cost)),
    ...pair("usage", u.input_tokens + " in / " + u.output_tokens + " out tokens, " +
      count(u.model_requests, "model call") + ", " + count(u.turns_completed, "turn")),
    ...pair("branch", branchId ? el("code", {}, shortId(o.branch_id)) : "root"));
  document.getElementById("cancel").disabled = o.status === "idle" || o.status === "cancelled";
  document.title = "threads: " + (o.first_input || threadId);
}

// ---- actions -------------------------------------------------------------------------------

async function act(run) {
  said("");
  try { said(el("span", { class: "ok" }, await run())); } catch (error) { said(refusalNode(error)); }
  refresh();
}

document.getElementById("cancel").addEventListener("click", () => act(async () => {
  const answer = await api("POST", onBranch("/cancel"));
  return answer.status === 202 ? "Cancel queued: the process running this thread records it at its next step."
    : "Cancel recorded.";
}));

function idempotencyKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

document.getElementById("message-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const box = document.getElementById("message");
  const text = box.value.trim();
  act(async () => {
    const body = { agent: overview ? overview.agent : "", input: text, thread_id: threadId };
    if (branchId) body.branch_id = branchId;
    await api("POST", "/v1/runs", body, { "idempotency-key": idempotencyKey() });
    box.value = "";
    return "Sent. The run shows below as it goes.";
  });
});

function forkAt(snapshot) {
  act(async () => {
    const answer = await api("POST", onBranch("/forks"), { event_id: snapshot.event_id });
    showBranches();
    return el("span", {}, "Forked at seq " + snapshot.seq + ": ",
      pageLink(threadPath(threadId, answer.data.branch_id), "open the new branch", { id: "new-branch" }));
  });
}

document.getElementById("raw-toggle").addEventListener("click", (event) => {
  const raw = document.getElementById("raw-view");
  raw.hidden = !raw.hidden;
  document.getElementById("conversation-view").hidden = !raw.hidden;
  event.currentTarget.setAttribute("aria-pressed", String(!raw.hidden));
  event.currentTarget.textContent = raw.hidden ? "Raw events" : "Conversation";
});

async function showBranches() {
  let answer;
  try { answer = await api("GET", base + "/branches"); } catch (error) { return; }
  if (answer.data.length < 2) return;
  const links = answer.data.map((b) => b.parent_branch_id
    ? pageLink(threadPath(threadId, b.branch_id), "fork " + shortId(b.branch_id))
    : pageLink(threadPath(threadId), "root"));
  document.getElementById("branches").replaceChildren("branches: ", ...links.flatMap((l) => [l, " "]));
}

// ---- live ----------------------------------------------------------------------------------

const WORTH_A_READ = new Set(["parked", "resumed", "approval_requested", "approval_granted", "approval_denied",
  "effect_resolved", "model_response", "model_response_recovered", "model_attempt_abandoned", "tool_result",
  "turn_completed", "cancel_requested", "cancelled", "snapshot", "user_input", "effect_unknown"]);

const LIVE_WORDS = { live: "following live", reconnecting: "connection lost: reconnecting…", refused: "not following" };

let following = null;

function start() {
  document.getElementById("thread-id").textContent = threadId;
  refresh();
  showBranches();
  if (following) following.stop();  // a new token: follow again with it
  following = follow(onBranch("/events"), (event) => {
    conversation.add(event);
    document.getElementById("live").dataset.seq = String(event.seq);
    if (WORTH_A_READ.has(event.type)) refresh();
  }, (state, error) => {
    const live = document.getElementById("live");
    live.textContent = LIVE_WORDS[state] + (error ? " (" + error.code + ": " + error.message + ")" : "");
    live.dataset.state = state;
  });
}

if (tokenForm(start)) start();
