// Following a branch live: GET /v1/threads/{id}/events (Server-Sent Events) read with fetch,
// so the bearer token goes in the Authorization header (EventSource can't send one). When the
// connection drops it reconnects with Last-Event-ID set to the last seq it handled, so no
// event is missed or handled twice; it waits longer after each failure, up to 10 s.
"use strict";

import { authorization } from "./api.js";

export function follow(path, onEvent, onState) {
  let last = 0;
  let stopped = false;
  let controller = null;
  let wait = 500;

  async function once() {
    controller = new AbortController();
    const headers = { ...authorization(), accept: "text/event-stream" };
    if (last > 0) headers["last-event-id"] = String(last);
    const response = await fetch(path, { headers, signal: controller.signal, cache: "no-store" });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      const error = body.error || { code: "http_" + response.status, message: "" };
      onState("refused", error);
      return response.status >= 500;  // a refusal is final; a failure is tried again
    }
    onState("live");
    wait = 500;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) return true;
      buffer += decoder.decode(chunk.value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let id = null;
        let data = "";
        for (const line of frame.split("\n")) {
          if (line.startsWith("id: ")) id = Number(line.slice(4));
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (!data) continue;
        const message = JSON.parse(data);
        if (message.kind === "event" && (id === null || id > last)) {
          onEvent(message.event);
          if (id !== null) last = id;
        }
      }
    }
  }

  async function loop() {
    while (!stopped) {
      let again;
      try { again = await once(); } catch (error) { again = true; }
      if (stopped || !again) return;
      onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, wait));
      wait = Math.min(wait * 2, 10_000);
    }
  }

  loop();
  return { stop() { stopped = true; if (controller) controller.abort(); } };
}
