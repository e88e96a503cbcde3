// The thread list: the tenant's threads, parked first then the most recently updated,
// filtered by status, agent and part of the id, a page at a time (the host pages them; the
// filters live in the address so a reload or a shared link keeps them).
"use strict";

import { api } from "./api.js";
import { badge, costText, el, notice, pageLink, shortId, threadPath, timeEl, tokenForm } from "./dom.js";

const PAGE = Number(new URLSearchParams(location.search).get("limit")) || 50;  // threads a page
const form = document.getElementById("filters");
const fields = ["status", "agent", "q"];
let pages = [];  // the path of each page shown so far: [first, second, ...]
let next = null;

function filterQuery() {
  const query = new URLSearchParams();
  for (const name of fields) {
    const value = document.getElementById(name).value.trim();
    if (value) query.set(name, value);
  }
  return query;
}

function fromAddress() {
  const query = new URLSearchParams(location.search);
  for (const name of fields) document.getElementById(name).value = query.get(name) || "";
}

const agentsSeen = new Set();

function row(t) {
  const updated = t.updated_at ? timeEl(t.updated_at) : "";
  const link = pageLink(threadPath(t.thread_id), shortId(t.thread_id), { title: t.thread_id, class: "mono" });
  const waiting = t.waiting ? el("span", { class: "waiting" }, " · " + t.waiting + " waiting") : null;
  if (t.agent && !agentsSeen.has(t.agent)) {
    agentsSeen.add(t.agent);
    document.getElementById("agents").append(el("option", { value: t.agent }));
  }
  return el("tr", { "data-thread": t.thread_id },
    el("td", {}, updated), el("td", {}, link), el("td", {}, t.agent || ""),
    el("td", {}, badge(t.status), waiting), el("td", { class: "first" }, t.first_input || ""),
    el("td", { class: "num" }, costText(t.cost)));
}

async function show(path) {
  notice("");
  let answer;
  try { answer = await api("GET", path); } catch (error) { notice("", error); return; }
  document.querySelector("#threads tbody").replaceChildren(...answer.data.map(row));
  document.getElementById("empty").hidden = answer.data.length > 0;
  next = answer.next;
  document.getElementById("next-page").disabled = !next;
  document.getElementById("prev-page").disabled = pages.length < 2;
  document.getElementById("first-page").disabled = pages.length < 2;
}

function firstPage() {
  const query = filterQuery();
  if (PAGE !== 50) query.set("limit", String(PAGE));  // a page size asked for in the address
  history.replaceState(null, "", "/ui/" + (query.toString() ? "?" + query : ""));
  query.set("limit", String(PAGE));
  pages = ["/v1/threads?" + query];
  return show(pages[0]);
}

form.addEventListener("submit", (event) => { event.preventDefault(); firstPage(); });
form.addEventListener("reset", () => setTimeout(firstPage));
document.getElementById("status").addEventListener("change", firstPage);
document.getElementById("next-page").addEventListener("click", () => {
  if (!next) return;
  pages.push(next);
  show(next);
});
document.getElementById("prev-page").addEventListener("click", () => {
  if (pages.length < 2) return;
  pages.pop();
  show(pages[pages.length - 1]);
});
document.getElementById("first-page").addEventListener("click", firstPage);

function start() {
  fromAddress();
  firstPage();
}

if (tokenForm(start)) start();
