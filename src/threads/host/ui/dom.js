// Building the page: elements made with text nodes only (nothing from a log is ever parsed as
// HTML, and no link is made from log data), and how times, money and JSON are written.
"use strict";

import { hasToken, inWords, setToken } from "./api.js";

// el("p", {class: "x", "data-seq": 3}, "text", childNode, ...): strings become text nodes.
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child);  // a string becomes a text node, never markup
  }
  return node;
}

export function button(label, cls, onClick, attrs) {
  const node = el("button", { type: "button", class: cls, ...(attrs || {}) }, label);
  node.addEventListener("click", onClick);
  return node;
}

// A link to a page of this console (never to a URL taken from data).
export function pageLink(path, label, attrs) {
  return el("a", { href: path, ...(attrs || {}) }, label);
}

export function threadPath(threadId, branchId) {
  const base = "/ui/threads/" + encodeURIComponent(threadId);
  return branchId ? base + "?branch=" + encodeURIComponent(branchId) : base;
}

const pad = (n) => String(n).padStart(2, "0");

export function when(ms) {
  if (ms === null || ms === undefined) return "";
  const d = new Date(ms);
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
    pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
}

export function timeEl(ms) {
  return el("time", { datetime: new Date(ms).toISOString(), title: new Date(ms).toISOString() }, when(ms));
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  if (ms < 60_000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60_000) + " min " + Math.round((ms % 60_000) / 1000) + " s";
}

export function relative(ms, now) {
  const gap = Math.round((ms - (now || Date.now())) / 1000);
  const size = Math.abs(gap);
  const text = size < 90 ? size + " s" : size < 5400 ? Math.round(size / 60) + " min"
    : size < 129600 ? Math.round(size / 3600) + " h" : Math.round(size / 86400) + " days";
  return gap >= 0 ? "in " + text : text + " ago";
}

// Nano-units of a currency (1e9 = one unit), as "USD 0.000123"; unknown spend stays unknown.
export function money(nanos, currency) {
  if (nanos === null || nanos === undefined) return "unknown";
  const units = nanos / 1e9;
  const digits = units === 0 ? 2 : units < 0.01 ? 6 : units < 1 ? 4 : 2;
  return (currency || "USD") + " " + units.toFixed(digits);
}

export function costText(cost) {
  if (!cost) return "no price";  // no currency pinned: no cost projection, never a zero
  const known = money(cost.known_nanos, cost.currency);
  if (cost.complete) return known;
  if (!cost.bounded) return known + " (no upper bound)";
  return known + " (at most " + money(cost.upper_bound_nanos, cost.currency) + ")";
}

export function pretty(value) { return JSON.stringify(value, null, 2); }

export function who(principal) {
  if (!principal) return "";
  return principal.subject + " (" + principal.issuer + "/" + principal.tenant + ")";
}

export function actorText(actor) {
  if (!actor) return "";
  return actor.principal ? who(actor.principal) : actor.kind;
}

export function shortId(id) { return id.length > 13 ? id.slice(0, 8) + "…" + id.slice(-4) : id; }

export function badge(text, kind) { return el("span", { class: "badge " + (kind || text) }, text); }

// A refusal, in words, with the host's code and message.
export function refusalNode(error) {
  const { code, words, detail } = inWords(error);
  return el("div", { class: "refusal", role: "alert" },
    el("strong", {}, words), " ", el("code", {}, code), detail ? el("span", { class: "detail-msg" }, " — " + detail) : null);
}

export function notice(text, error) {
  const box = document.getElementById("notice");
  box.replaceChildren();
  if (error) box.append(refusalNode(error));
  else if (text) box.append(text);
}

// The header's token form: the page starts once a token is known.
export function tokenForm(start) {
  const form = document.getElementById("token-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    setToken(input.value);
    input.value = "";
    start();
  });
  if (!hasToken()) {
    notice("Give your token (or open this page with #token=… in the address).");
    document.getElementById("token").focus();
    return false;
  }
  return true;
}
