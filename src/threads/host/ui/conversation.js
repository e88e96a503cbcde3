// A branch's events as a conversation a person reads: user and assistant messages, each tool
// call (collapsible: arguments, permission, approval, effect and result), each model call with
// its duration, usage and cost, and the notes that matter (parks, resumes, cancels, the turn's
// end) with who did them; plus every event as it is stored, in the raw view. Events arrive in
// seq order, each once; each is drawn when it arrives, so a long thread is not redrawn.
"use strict";

import { actorText, badge, button, duration, el, money, pageLink, pretty, threadPath, timeEl, who } from "./dom.js";

const NOTES = {
  parked: (d) => "Parked: " + d.reason.replaceAll("_", " ") + " (" + d.address.kind + " " + d.address.id + ")",
  resumed: (d) => "Resumed (" + d.address.kind + " " + d.address.id + ")",
  cancel_requested: (d) => "Cancel requested" + (d.reason ? ": " + d.reason : "") + " (scope " + d.scope + ")",
  cancelled: () => "Cancelled",
  turn_completed: (d) => "Turn ended: " + d.reason.replaceAll("_", " ") + (d.code ? " (" + d.code + ")" : ""),
  budget_exceeded: (d) => "Budget exceeded: " + d.limit + " (" + d.scope + ")",
  settings_changed: (d) => "Model settings changed (" + d.reason + ")",
  mode_changed: (d) => "Permission mode changed to " + d.mode,
  permission_rule_added: (d) => "Rule added: " + d.rule + " (" + d.decision + ")",
  retry_scheduled: (d) => "Retry scheduled, not before " + new Date(d.not_before).toISOString(),
  fork: (d) => "Forked from branch " + d.parent_branch_id + " (" + d.reason + ")",
  snapshot: (d) => "Snapshot " + d.snapshot_id + " of sandbox " + d.sandbox_id,
  log_repaired: (d) => "Log repaired: " + d.truncated_bytes + " torn bytes dropped",
  output_validated: (d) => "Structured output " + d.outcome,
};

function textOf(parts) {
  return (parts || []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
}

function meta(event, ...extra) {
  return el("div", { class: "meta" }, el("span", { class: "who" }, actorText(event.actor)), " · ",
    timeEl(event.time), ...extra);
}

export class Conversation {
  constructor(list, raw, onFork) {
    this.list = list;
    this.raw = raw;
    this.onFork = onFork;
    this.seqs = new Set();
    this.calls = new Map();   // call_id -> {row, log, result, state}
    this.models = new Map();  // request event_id -> {row, stats, body, started}
    this.effectClass = new Map();  // tool name -> effect class, from the thread's tool set
    this.forkable = new Set();  // snapshot event ids that are fork points now
    this.costs = new Map();  // request event_id -> model call of the overview
  }

  add(event) {
    if (this.seqs.has(event.seq)) return;
    this.seqs.add(event.seq);
    this.rawRow(event);
    const draw = this["on_" + event.type];
    if (draw) draw.call(this, event.data, event);
    else if (NOTES[event.type]) this.note(event, NOTES[event.type](event.data));
    else this.note(event, event.type.replaceAll("_", " "), true);
  }

  rawRow(event) {
    const data = el("details", {}, el("summary", {}, "data"), el("pre", {}, pretty(event.data)));
    this.raw.append(el("tr", { "data-seq": event.seq, class: event.type },
      el("td", { class: "num" }, String(event.seq)), el("td", {}, timeEl(event.time)),
      el("td", {}, el("code", {}, event.type)), el("td", {}, actorText(event.actor)), el("td", {}, data)));
  }

  row(event, cls, ...children) {
    const node = el("li", { class: "row " + cls, "data-seq": event.seq, "data-type": event.type }, ...children);
    this.list.append(node);
    return node;
  }

  note(event, text, withData) {
    const body = [el("span", { class: "note-text" }, text)];
    if (withData) body.push(el("details", {}, el("summary", {}, "details"), el("pre", {}, pretty(event.data))));
    return this.row(event, "note " + event.type, meta(event), ...body);
  }

  on_thread_started(d, event) {
    for (const t of d.tools || []) this.effectClass.set(t.name, t.effect_class);
    const tools = (d.tools || []).map((t) => t.name + " (" + t.effect_class + ")").join(", ") || "none";
    const model = d.model ? d.model.provider + "/" + d.model.name : "";
    const row = this.note(event, "Started with agent " + d.agent_name + ", model " + model + "; tools: " + tools);
    if (d.parent) row.append(this.threadLink(d.parent.thread_id, d.parent.relation === "handoff" ? "handed off from" : "started by (" + d.parent.relation + ")"));
  }

  // ---- the tree: threads this one started, and the thread it came from --------------------

  threadLink(threadId, words) {
    return el("span", { class: "tree-link" }, " · " + words + " ",
      pageLink(threadPath(threadId), threadId, { class: "thread-link", "data-thread": threadId }));
  }

  on_handoff(d, event) {
    this.callLine(d, event, "handed off to " + d.to_agent, "handed off");
    const row = this.note(event, "Handed off to " + d.to_agent);
    row.append(this.threadLink(d.to_thread_id, "continues in"));
  }

  on_agent_spawned(d, event) {
    this.callLine(d, event, "started subagent " + d.agent_name + " (" + d.mode + ")", "running");
    const row = this.note(event, "Started subagent " + d.agent_name + " (" + d.mode + ")");
    row.append(this.threadLink(d.child_thread_id, "in"));
  }

  on_agent_finished(d, event) {
    const row = this.note(event, "Subagent ended: " + d.status.replaceAll("_", " "));
    row.append(this.threadLink(d.child_thread_id, "in"));
  }

  on_tools_changed(d, event) {
    for (const t of d.tools || []) this.effectClass.set(t.name, t.effect_class);
    this.note(event, "Tools changed: " + (d.tools || []).map((t) => t.name).join(", "));
  }

  on_user_input(d, event) {
    const text = d.text !== undefined ? d.text : textOf(d.content);
    this.row(event, "msg user", meta(event, " · ", d.source || "input"), el("div", { class: "text" }, text));
  }

  on_steer(d, event) {
    const text = d.text !== undefined ? d.text : textOf(d.content);
    this.row(event, "msg user", meta(event, " · steer"), el("div", { class: "text" }, text));
  }

  on_model_request(d, event) {
    const stats = el("span", { class: "stats" }, "waiting for the model…");
    const body = el("div", { class: "text" });
    const row = this.row(event, "msg assistant pending", el("div", { class: "meta" }, "assistant · ",
      timeEl(event.time), " · model call" + (d.attempt > 1 ? " (attempt " + d.attempt + ")" : ""), " · ", stats), body);
    row.setAttribute("data-request", event.event_id);
    this.models.set(event.event_id, { row, stats, body, started: event.time });
  }

  on_model_response(d, event) {
    const call = this.models.get(d.request_event_id);
    if (!call) { this.note(event, "model response"); return; }
    call.row.classList.remove("pending");
    const text = textOf(d.content);
    const asked = (d.content || []).filter((p) => p.type === "tool_use").map((p) => p.name);
    call.body.replaceChildren(text ? text : el("span", { class: "none" }, asked.length ? "" : "(no text)"));
    if (asked.length) call.body.append(el("div", { class: "asks" }, "asks for: " + asked.join(", ")));
    call.usage = d.usage || {};
    call.ended = event.time;
    this.statsOf(d.request_event_id);
  }

  on_model_response_recovered(d, event) { this.on_model_response(d, event); }

  on_model_attempt_abandoned(d, event) {
    const call = this.models.get(d.request_event_id);
    if (!call) { this.note(event, "model call abandoned"); return; }
    call.row.classList.remove("pending");
    call.row.classList.add("abandoned");
    call.ended = event.time;
    call.body.replaceChildren(el("span", { class: "none" }, "abandoned: " + d.provider_outcome + " (" + d.reason + ")"));
    this.statsOf(d.request_event_id);
  }

  statsOf(requestId) {
    const call = this.models.get(requestId);
    if (!call || call.ended === undefined) return;
    const parts = [duration(call.ended - call.started)];
    const usage = call.usage;
    if (usage) {
      const tokens = (n) => (n === null || n === undefined ? "?" : String(n));
      parts.push(tokens(usage.input_tokens) + " in / " + tokens(usage.output_tokens) + " out tokens");
    }
    const priced = this.costs.get(requestId);
    if (priced && priced.cost_nanos !== null) parts.push(money(priced.cost_nanos, this.currency));
    call.stats.textContent = parts.join(" · ");
  }

  // The overview adds each model call's cost and which snapshots are fork points now.
  annotate(overview) {
    this.currency = overview.cost ? overview.cost.currency : null;
    for (const call of overview.model_calls) this.costs.set(call.request_event_id, call);
    for (const id of this.models.keys()) this.statsOf(id);
    this.forkable = new Set(overview.fork_points.map((p) => p.event_id));
    for (const node of this.list.querySelectorAll("li[data-snapshot]")) {
      node.querySelector("button.fork").hidden = !this.forkable.has(node.dataset.snapshot);
    }
  }

  on_snapshot(d, event) {
    const row = this.note(event, NOTES.snapshot(d));
    row.setAttribute("data-snapshot", event.event_id);
    const fork = button("Fork here", "fork", () => this.onFork(event), { "aria-label": "fork at snapshot seq " + event.seq });
    fork.hidden = !this.forkable.has(event.event_id);
    row.append(fork);
  }

  // ---- tool calls ------------------------------------------------------------------------

  on_tool_call(d, event) {
    const state = badge("called", "state");
    const log = el("ul", { class: "call-log" });
    const result = el("div", { class: "result" });
    const cls = this.effectClass.get(d.name) || "unknown class";
    const details = el("details", {},
      el("summary", {}, el("span", { class: "tool-name" }, d.name), " ",
        el("code", { class: "args-inline" }, JSON.stringify(d.input)), " ", state),
      el("div", { class: "call-body" },
        el("div", { class: "meta" }, "tool call " + d.call_id + " · effect class " + cls + " · ", timeEl(event.time)),
        el("h4", {}, "arguments"), el("pre", { class: "args" }, pretty(d.input)), log, result));
    const row = this.row(event, "call", details);
    row.setAttribute("data-call", d.call_id);
    row.id = "call-" + d.call_id;
    this.calls.set(d.call_id, { row, log, result, state, name: d.name });
  }

  callLine(d, event, text, stateText) {
    const call = this.calls.get(d.call_id);
    if (!call) { this.note(event, text); return null; }
    const byPerson = event.actor && event.actor.principal ? " by " + who(event.actor.principal) : "";
    call.log.append(el("li", { "data-type": event.type }, text + byPerson + " · ", timeEl(event.time)));
    if (stateText) { call.state.textContent = stateText; call.state.className = "badge state " + stateText.split(" ")[0]; }
    return call;
  }

  on_permission_decision(d, event) {
    const from = d.source + (d.rule_id ? ", rule " + d.rule_id : "") + (d.reason ? ": " + d.reason : "");
    this.callLine(d, event, "permission " + d.decision + " (" + from + ")", d.decision === "ask" ? "needs approval" : null);
  }

  on_approval_requested(d, event) {
    this.callLine(d, event, "approval requested, expires " + new Date(d.expires_at).toISOString(), "needs approval");
  }

  on_approval_granted(d, event) {
    this.callLine(d, event, "approved" + (d.reason ? " (" + d.reason + ")" : ""), "approved");
    this.note(event, "Approval granted for " + this.toolOf(d.call_id));
  }

  on_approval_denied(d, event) {
    this.callLine(d, event, "denied" + (d.reason ? " (" + d.reason + ")" : ""), "denied");
    this.note(event, "Approval denied for " + this.toolOf(d.call_id) + (d.reason ? ": " + d.reason : ""));
  }

  toolOf(callId) { const call = this.calls.get(callId); return call ? call.name : callId; }

  on_effect_begin(d, event) { this.callLine(d, event, "effect begun (attempt " + d.attempt + ")", "running"); }

  on_effect_commit(d, event) { this.callLine(d, event, "effect committed", "committed"); }

  on_effect_unknown(d, event) {
    this.callLine(d, event, "outcome unknown: " + d.reason.replaceAll("_", " "), "in doubt");
  }

  on_effect_resolved(d, event) {
    this.callLine(d, event, "resolved " + d.outcome + " (by " + d.by + ")", "resolved");
    if (d.by === "human") this.note(event, "Effect of " + this.toolOf(d.call_id) + " resolved: " + d.outcome);
  }

  on_tool_result(d, event) {
    const call = this.callLine(d, event, "result (" + d.origin.replaceAll("_", " ") + ")", d.is_error ? "error" : "done");
    if (!call) return;
    const text = textOf(d.content) || d.preview;
    call.result.replaceChildren(el("h4", {}, d.is_error ? "error" : "result"),
      el("pre", { class: "result-text" + (d.is_error ? " error" : "") }, text));
    if (d.ref) call.result.append(el("p", { class: "none" }, "The whole result is stored as an artifact (" + d.ref.bytes + " bytes)."));
  }

  on_tool_result_late(d, event) { this.on_tool_result({ ...d, origin: "late" }, event); }

  on_parked(d, event) {
    this.note(event, NOTES.parked(d));
    if (d.address.kind === "effect") {
      const callId = d.address.id.slice(d.address.id.indexOf(":") + 1);
      const call = this.calls.get(callId);
      if (call) { call.state.textContent = "parked"; call.state.className = "badge state parked"; }
    }
  }
}
