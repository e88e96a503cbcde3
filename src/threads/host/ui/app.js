// The web timeline: reads and decides through the /v1 API with the viewer's bearer token.
// The token comes from "#token=..." (a URL fragment never reaches the server) or the form,
// and is kept in this tab's sessionStorage only.
"use strict";

const KEY = "threads.token";

function takeToken() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(KEY) || "";
}

let token = takeToken();

function notice(text) { document.getElementById("notice").textContent = text || ""; }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

async function api(method, path, body) {
  const headers = { authorization: "Bearer " + token };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = data.error || { code: String(response.status), message: "" };
    throw new Error(error.code + ": " + error.message);
  }
  return data;
}

document.getElementById("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  token = document.getElementById("token").value.trim();
  sessionStorage.setItem(KEY, token);
  start();
});

// ---- the list of threads -------------------------------------------------------------------

async function showThreads() {
  const body = document.querySelector("#threads tbody");
  body.replaceChildren();
  for (const t of await api("GET", "/v1/threads")) {
    const link = el("a", { href: "/ui/threads/" + encodeURIComponent(t.thread_id) }, t.thread_id);
    body.append(el("tr", {}, el("td", {}, link), el("td", {}, t.agent || ""),
      el("td", {}, t.status), el("td", {}, String(t.head_seq))));
  }
}

// ---- one thread ------------------------------------------------------------------------------

const threadId = decodeURIComponent(location.pathname.split("/").pop());
const seen = new Map(); // seq -> event
let following = null;

function who(actor) {
  const p = actor.principal;
  return p ? actor.kind + " " + p.subject + " (" + p.issuer + "/" + p.tenant + ")" : actor.kind;
}

function summary(event) {
  const d = event.data;
  switch (event.type) {
    case "thread_started":
      return "agent " + d.agent_name + "; tools: " + ((d.tools || []).map((t) => t.name + " (" + t.effect_class + ")").join(", ") || "none");
    case "user_input": return d.text || "";
    case "model_request": return "attempt " + d.attempt;
    case "model_response":
      return (d.content || []).map((p) => p.type === "text" ? p.text : "→ " + p.name).join(" ");
    case "tool_call": return d.name + " " + JSON.stringify(d.input);
    case "tool_result": return d.call_id + ": " + (d.preview || "");
    case "parked": return d.reason + " " + d.address.kind + " " + d.address.id;
    case "resumed": return d.address.kind + " " + d.address.id;
    case "turn_completed": return d.reason;
    default: return JSON.stringify(d);
  }
}

function addEvent(event) {
  if (seen.has(event.seq)) return;
  seen.set(event.seq, event);
  document.getElementById("events").append(el("li", { class: event.type, "data-seq": event.seq },
    el("span", { class: "seq" }, String(event.seq)), el("span", { class: "type" }, event.type),
    el("span", { class: "who" }, who(event.actor)), el("span", { class: "detail" }, summary(event))));
}

function openParks() {
  const parks = new Map();
  for (const event of [...seen.values()].sort((a, b) => a.seq - b.seq)) {
    const key = event.type === "parked" || event.type === "resumed"
      ? event.data.address.kind + ":" + event.data.address.id : null;
    if (event.type === "parked") parks.set(key, event);
    if (event.type === "resumed") parks.delete(key);
  }
  return [...parks.values()];
}

function callOf(callId) {
  return [...seen.values()].find((e) => e.type === "tool_call" && e.data.call_id === callId);
}

async function decide(method, path, body) {
  notice("");
  try { await api(method, path, body); } catch (error) { notice(String(error.message)); return; }
  await refreshPending();
  follow();
}

function card(title, args, buttons) {
  const box = el("div", { class: "card" }, el("strong", {}, title),
    el("pre", { class: "detail" }, JSON.stringify(args, null, 2)));
  for (const [label, cls, onClick] of buttons) {
    const button = el("button", { class: cls, type: "button" }, label);
    button.addEventListener("click", onClick);
    box.append(button);
  }
  return box;
}

async function refreshPending() {
  const base = "/v1/threads/" + encodeURIComponent(threadId);
  const pending = document.getElementById("pending");
  const cards = [];
  for (const a of await api("GET", base + "/approvals")) {
    const path = base + "/approvals/" + encodeURIComponent(a.challenge_id);
    cards.push(card("approve " + a.tool + "?", a.input, [
      ["approve", "go", () => decide("POST", path, { decision: "grant" })],
      ["deny", "stop", () => decide("POST", path, { decision: "deny", reason: "denied from the web timeline" })],
    ]));
  }
  for (const park of openParks()) {
    if (park.data.address.kind !== "effect") continue;
    const effectKey = park.data.address.id;
    const call = callOf(effectKey.slice(effectKey.indexOf(":") + 1));
    const path = base + "/parked/" + encodeURIComponent(effectKey) + "/resolve";
    cards.push(card("did " + (call ? call.data.name : effectKey) + " happen? (" + park.data.reason + ")",
      call ? call.data.input : {}, [
        ["it happened", "go resolve-done", () => decide("POST", path, { resolution: "assume_done" })],
        ["it did not: send again", "stop resolve-not-done",
          () => decide("POST", path, { resolution: "assume_not_done" })],
      ]));
  }
  pending.replaceChildren(...(cards.length ? cards : [el("p", { class: "none" }, "nothing")]));
}

function showResult(result) {
  const box = document.getElementById("result");
  box.hidden = false;
  box.className = "result " + result.status;
  const detail = result.output !== undefined ? ": " + result.output
    : result.reason ? ": " + result.reason : result.error ? ": " + result.error.code : "";
  box.textContent = "run " + result.status + detail;
}

async function follow() {
  const inputs = [...seen.values()].filter((e) => e.type === "user_input");
  if (!inputs.length) return;
  const runId = inputs[inputs.length - 1].event_id;
  const after = Math.max(0, ...seen.keys());
  if (following) following.abort();
  const controller = new AbortController();
  following = controller;
  const url = "/v1/threads/" + encodeURIComponent(threadId) + "/runs/" +
    encodeURIComponent(runId) + "/events?after_seq=" + after;
  let response;
  try {
    response = await fetch(url, { headers: { authorization: "Bearer " + token }, signal: controller.signal });
  } catch (error) { return; }
  if (!response.ok) { notice("stream: " + response.status); return; }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    let chunk;
    try { chunk = await reader.read(); } catch (error) { return; }
    if (chunk.done) return;
    buffer += decoder.decode(chunk.value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const message = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = message.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("");
      if (!data) continue;
      const item = JSON.parse(data);
      if (item.kind === "event") {
        addEvent(item.event);
        if (["parked", "resumed", "approval_requested", "approval_granted", "approval_denied"].includes(item.event.type)) {
          await refreshPending();
        }
      } else if (item.kind === "result") {
        showResult(item.result);
        await refreshPending();
      }
    }
  }
}

async function showThread() {
  document.getElementById("thread-id").textContent = threadId;
  const timeline = await api("GET", "/v1/threads/" + encodeURIComponent(threadId) + "/timeline");
  for (const entry of timeline.entries) addEvent(entry.event);
  await refreshPending();
  follow();
}

async function start() {
  if (!token) { notice("Give your token (or open this page with #token=...)."); return; }
  notice("");
  try {
    if (document.body.dataset.page === "index") await showThreads(); else await showThread();
  } catch (error) { notice(String(error.message)); }
}

start();
