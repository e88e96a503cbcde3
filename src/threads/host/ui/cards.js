// How one thing waiting for a person is shown, in the inbox and on its thread alike: the tool
// and its arguments, the effect class, who asked and when, and for a parked effect what
// threads proved, what it could not, and the risk of each choice.
"use strict";

import { el, pretty, relative, timeEl, who } from "./dom.js";

export function itemId(item) {
  if (item.approval) return item.approval.challenge_id;
  if (item.effect) return item.effect.effect_key;
  return item.question.call_id;
}

function fact(term, ...value) { return [el("dt", {}, term), el("dd", {}, ...value)]; }

function args(input) {
  return el("pre", { class: "args", tabindex: "0", "aria-label": "arguments" }, pretty(input));
}

export function itemTitle(item) {
  if (item.approval) return "Approve " + item.approval.tool + "?";
  if (item.effect) return "Did " + item.effect.tool + " happen?";
  return "Question: " + item.question.question;
}

// The facts of an item as a description list, and its longer text.
export function itemBody(item) {
  const now = Date.now();
  if (item.approval) {
    const a = item.approval;
    const expiry = a.expired ? el("strong", { class: "expired" }, "expired ", timeEl(a.expires_at))
      : el("span", {}, timeEl(a.expires_at), " (" + relative(a.expires_at, now) + ")");
    return [el("dl", { class: "facts" },
      ...fact("tool", el("code", {}, a.tool)), ...fact("effect class", a.effect_class),
      ...fact("asked by", who(a.requested_by) || "nobody recorded"),
      ...fact("asked", timeEl(a.requested_at)), ...fact("expires", expiry)),
    args(a.input)];
  }
  if (item.effect) {
    const e = item.effect;
    return [el("dl", { class: "facts" },
      ...fact("tool", el("code", {}, e.tool)), ...fact("effect class", e.effect_class),
      ...fact("dispatches", String(e.attempts)), ...fact("why in doubt", e.reason),
      ...fact("parked", e.parked_at ? timeEl(e.parked_at) : "")),
    args(e.input),
    el("div", { class: "proof" },
      el("p", {}, el("strong", {}, "What threads proved: "), e.proved),
      el("p", {}, el("strong", {}, "What it could not prove: "), e.unproved)),
    el("ul", { class: "risks" },
      el("li", {}, el("strong", {}, "assume_done — "), e.if_done),
      el("li", {}, el("strong", {}, "assume_not_done — "), e.if_not_done))];
  }
  const q = item.question;
  return [el("dl", { class: "facts" },
    ...fact("asked by", who(q.asked_by) || "nobody recorded"), ...fact("asked", timeEl(q.asked_at)),
    ...fact("answers", q.options ? q.options.join(" · ") + (q.multi_select ? " (several)" : "") : "free text"),
    ...fact("expires", q.expires_at ? timeEl(q.expires_at) : "never"))];
}

export function deciderNote(item) {
  if (item.may_decide) return null;
  const whom = item.question ? "Only " + (who(item.question.asked_by) || "the person who asked") + " may answer it"
    : "Only the thread's starter or its agent's approvers may decide it";
  return el("p", { class: "not-yours" }, whom + "; the host will refuse you.");
}
