// The effects of a transaction: staged (waiting for commit), dispatched, dead-lettered, with
// a retry for a dead-lettered one. Before commit the outbox holds nothing of the transaction:
// its staged effects are read from its live steps (the built-ins' output says
// {staged: true, channel, idempotency_key}). After commit they are the outbox's, filled from
// ListEffects / RetryEffect when the server offers them (its OpenAPI document); without
// them, what the transaction's status implies.
//
//   GET  /v1/transactions/{id}/effects                   -> {effects: [{effect_id, channel,
//        status: pending|delivering|delivered|dead, attempts, last_error, idempotency_key}]}
//   POST /v1/transactions/{id}/effects/{effect_id}/retry -> the effect

import { api } from "./api.js";
import { badge, el } from "./dom.js";

// Statuses whose effects went to the outbox (a commit happened).
const RELEASED = ["COMMITTED", "COMPENSATING", "COMPENSATED"];
const ENDED_UNSENT = ["ROLLED_BACK", "FAILED"];

function stagedBody(t) {
  const staged = t.steps.filter((s) => s.live && s.status === "SUCCESS" && s.output && s.output.staged === true);
  if (!staged.length) {
    return el("p", {}, ENDED_UNSENT.includes(t.status)
      ? "Nothing was sent: the transaction ended without a commit."
      : "No effect staged yet. Staged effects wait for commit and are dropped on rollback.");
  }
  const status = ENDED_UNSENT.includes(t.status) ? "dropped" : "staged";
  const note = status === "dropped" ? "dropped unsent: the transaction ended without a commit" : "sent only after a durable commit";
  return el("table", { class: "effects-staged" },
    el("thead", {}, el("tr", {}, ...["step", "channel", "status", "idempotency key", ""].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, ...staged.map((s) => el("tr", { "data-staged-step": s.step_id },
      el("td", { class: "num" }, s.step_id), el("td", {}, s.output.channel || s.tool_name), el("td", {}, badge(status)),
      el("td", {}, el("code", {}, s.output.idempotency_key || "")), el("td", {}, note)))));
}

export function effectsBody(t, operations, redraw) {
  if (!RELEASED.includes(t.status)) return stagedBody(t);
  if (!operations.has("ListEffects")) {
    return el("p", {}, "Committed: staged effects were handed to the dispatcher, which delivers each once (see the server's metrics for delivery).");
  }
  const body = el("div", {}, el("p", {}, "Loading effects…"));
  api.listEffects(t.transaction_id).then((r) => {
    const rows = (r.effects || []).map((e) => el("tr", { "data-effect": e.effect_id },
      el("td", {}, e.channel), el("td", {}, badge(e.status)), el("td", { class: "num" }, e.attempts ?? ""),
      el("td", {}, e.last_error || ""),
      el("td", {}, e.status === "dead" && operations.has("RetryEffect")
        ? el("button", { type: "button", onclick: async () => {
          try { await api.retryEffect(t.transaction_id, e.effect_id); } catch (err) { alert(err.message); }
          redraw();
        } }, "Retry") : "")));
    body.replaceChildren(rows.length
      ? el("table", {}, el("thead", {}, el("tr", {}, ...["channel", "status", "attempts", "last error", ""].map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, ...rows))
      : el("p", {}, "This transaction staged no effects."));
  }).catch((e) => body.replaceChildren(el("p", { class: "error" }, e.message)));
  return body;
}
