// The inbox: everything waiting for a person across the tenant's threads, newest first. Each
// item links to its thread, where it is decided. Refreshed every 5 s while the page is shown.
"use strict";

import { api } from "./api.js";
import { deciderNote, itemBody, itemId, itemTitle } from "./cards.js";
import { badge, el, notice, pageLink, shortId, threadPath, timeEl, tokenForm } from "./dom.js";

const LIMIT = 50;
const KIND_NAMES = { approval: "approval", effect: "parked effect", question: "question" };
let kind = "";
let next = null;
let paged = false;  // more than the first page is shown: the timer leaves the list alone

function card(item) {
  const id = itemId(item);
  const link = pageLink(threadPath(item.thread_id) + "#item-" + encodeURIComponent(id),
    "Decide on the thread →", { class: "decide" });
  return el("li", { class: "card " + item.kind, "data-kind": item.kind, "data-thread": item.thread_id },
    el("div", { class: "card-head" }, badge(KIND_NAMES[item.kind], item.kind),
      el("h2", {}, itemTitle(item)),
      el("span", { class: "where" }, (item.agent || "no agent") + " · ",
        el("span", { class: "mono", title: item.thread_id }, shortId(item.thread_id)), " · ", timeEl(item.since))),
    ...itemBody(item), deciderNote(item), link);
}

async function show(path, append) {
  let answer;
  try { answer = await api("GET", path); } catch (error) { notice("", error); return; }
  notice("");
  const list = document.getElementById("inbox");
  if (append) list.append(...answer.data.map(card)); else list.replaceChildren(...answer.data.map(card));
  document.getElementById("empty").hidden = list.children.length > 0;
  next = answer.next;
  document.getElementById("more").hidden = !next;
}

function load() {
  const query = new URLSearchParams({ limit: String(LIMIT) });
  if (kind) query.set("kind", kind);
  paged = false;
  return show("/v1/inbox?" + query, false);
}

for (const choice of document.querySelectorAll("button.kind")) {
  choice.addEventListener("click", () => {
    kind = choice.dataset.kind;
    for (const other of document.querySelectorAll("button.kind")) {
      other.setAttribute("aria-pressed", String(other === choice));
    }
    load();
  });
}
document.getElementById("refresh").addEventListener("click", load);
document.getElementById("more").addEventListener("click", () => {
  if (!next) return;
  paged = true;
  show(next, true);
});

function start() {
  load();
  setInterval(() => { if (document.visibilityState === "visible" && !paged) load(); }, 5000);
}

if (tokenForm(start)) start();
