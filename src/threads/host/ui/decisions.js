// The decisions a person makes on a thread, each through its host route: grant or deny an
// approval, resolve a parked effect (assume_not_done only after a confirmation that says what
// may happen twice), answer a question. A refusal shows the host's code in words on the card.
"use strict";

import { api } from "./api.js";
import { deciderNote, itemBody, itemId, itemTitle } from "./cards.js";
import { badge, button, el, pretty, refusalNode } from "./dom.js";

export class Decisions {
  constructor(box, route, after) {
    this.box = box;
    this.route = route;    // "/approvals/…" -> the API path on this thread (and branch)
    this.after = after;    // called once a decision was recorded
    this.dialog = document.getElementById("confirm");
  }

  show(items) {
    // Redrawn only when what waits changed, so a reason being typed is not wiped by a refresh.
    const signature = JSON.stringify(items.map((i) => [itemId(i), i.may_decide, i.approval && i.approval.expired]));
    if (signature === this.signature) return;
    this.signature = signature;
    const focused = document.activeElement && this.box.contains(document.activeElement)
      ? document.activeElement.id : null;
    const cards = items.map((item) => this.card(item));
    this.box.replaceChildren(...(cards.length ? cards : [el("p", { class: "none" }, "Nothing waits for a decision.")]));
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
  }

  card(item) {
    const id = itemId(item);
    const status = el("div", { class: "card-status", role: "status" });
    const actions = el("div", { class: "actions" });
    const box = el("article", { class: "card " + item.kind, id: "item-" + id, "data-kind": item.kind, tabindex: "-1" },
      el("div", { class: "card-head" }, badge(item.kind === "effect" ? "parked effect" : item.kind, item.kind),
        el("h3", {}, itemTitle(item))),
      ...itemBody(item), deciderNote(item), actions, status);
    const decide = async (path, body, done) => {
      status.replaceChildren("sending…");
      for (const b of actions.querySelectorAll("button")) b.disabled = true;
      try {
        await api("POST", this.route(path), body);
        status.replaceChildren(el("span", { class: "ok" }, done));
        this.after();
      } catch (error) {
        status.replaceChildren(refusalNode(error));
        for (const b of actions.querySelectorAll("button")) b.disabled = false;
      }
    };
    if (item.approval) this.approvalActions(item.approval, actions, decide);
    else if (item.effect) this.effectActions(item.effect, actions, decide);
    else this.questionActions(item.question, actions, decide);
    return box;
  }

  approvalActions(a, actions, decide) {
    const path = "/approvals/" + encodeURIComponent(a.challenge_id);
    const reason = el("input", { type: "text", id: "reason-" + a.challenge_id, maxlength: "4096", placeholder: "optional" });
    const remember = el("input", { type: "checkbox", id: "remember-" + a.challenge_id });
    actions.append(
      el("label", {}, "reason ", reason),
      el("label", { class: "check" }, remember, " also allow later " + a.tool + " calls on this thread"),
      button("Approve", "go approve", () => {
        const body = { decision: "grant" };
        if (remember.checked) body.remember_rule = a.suggested_rules[0];
        decide(path, body, "Approved. The run goes on.");
      }, { id: "approve-" + a.challenge_id }),
      button("Deny", "stop deny", () => {
        const body = { decision: "deny" };
        if (reason.value.trim()) body.reason = reason.value.trim();
        decide(path, body, "Denied. The run goes on without it.");
      }, { id: "deny-" + a.challenge_id }));
  }

  effectActions(e, actions, decide) {
    const path = "/parked/" + encodeURIComponent(e.effect_key) + "/resolve";
    actions.append(
      button("It happened (assume_done)", "go resolve-done",
        () => decide(path, { resolution: "assume_done" }, "Recorded as done; the run goes on without sending it again."),
        { id: "done-" + e.call_id }),
      button("It did not happen: send it again (assume_not_done)…", "stop resolve-not-done",
        () => this.confirmResend(e, () => decide(path, { resolution: "assume_not_done" },
          "Recorded as not done; the run sends it again.")),
        { id: "not-done-" + e.call_id }));
  }

  // assume_not_done re-sends the call: say what may happen twice before doing it.
  confirmResend(e, proceed) {
    const dialog = this.dialog;
    document.getElementById("confirm-title").textContent = "Send " + e.tool + " again?";
    document.getElementById("confirm-body").replaceChildren(
      el("p", { class: "warning" }, el("strong", {}, "This may happen twice: "),
        e.tool + " with these arguments, if the first send did reach the provider."),
      el("pre", { class: "args" }, pretty(e.input)),
      el("p", {}, e.if_not_done),
      el("p", {}, "If you are not sure, check the provider first, or choose \"It happened\" instead."));
    const returnTo = document.activeElement;
    dialog.addEventListener("close", () => {
      if (returnTo) returnTo.focus();
      if (dialog.returnValue === "ok") proceed();
    }, { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  }

  questionActions(q, actions, decide) {
    const path = "/questions/" + encodeURIComponent(q.call_id) + "/answer";
    if (q.options) {
      const group = el("fieldset", { class: "options" }, el("legend", {}, q.multi_select ? "pick any" : "pick one"));
      q.options.forEach((option, n) => {
        const input = el("input", { type: q.multi_select ? "checkbox" : "radio", name: "answer-" + q.call_id,
          value: option, id: "answer-" + q.call_id + "-" + n });
        group.append(el("label", { class: "check" }, input, " " + option));
      });
      actions.append(group, button("Answer", "go answer", () => {
        const picked = [...group.querySelectorAll("input:checked")].map((i) => i.value);
        decide(path, { answer: q.multi_select ? picked : (picked[0] || "") }, "Answered. The run goes on.");
      }, { id: "answer-" + q.call_id }));
    } else {
      const text = el("textarea", { id: "answer-text-" + q.call_id, rows: "2", "aria-label": "your answer" });
      actions.append(text, button("Answer", "go answer",
        () => decide(path, { answer: text.value }, "Answered. The run goes on."), { id: "answer-" + q.call_id }));
    }
  }
}
