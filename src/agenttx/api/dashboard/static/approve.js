// The preview and approve screen of an approval_required transaction: what commit would do
// (the exact change set and its receipt), and an approver (another principal) approving that
// receipt once — or refusing it, saying why, so the agent can change the transaction and
// preview again. On a server without API keys the approver is named here; with keys the
// server takes the approver from the request's key instead.
// A receipt holds until its expires_at by the server's clock: the screen says when, asks the
// server at that moment, and once the server says "expired" (in the transaction's receipts, or
// refusing a decision) it disables the decision and says to preview again. A receipt the
// transaction moved past is "voided" (a later step, undo or rewind): the page redraws on the new
// revision and lists it so; a decision the server refuses as stale (SNAPSHOT_MISMATCH, when the
// redraw has not come yet) does as an expiry does.
// Shown only where a commit would need an approval: an open transaction whose
// approval_reasons (GetTransaction: its mode approval_required, or the policy file's approval
// rules as its live steps stand) are not empty, on a server that offers PreviewCommit and
// ApproveCommit (its OpenAPI document); the refusal controls only when it offers RefuseCommit
// too. A transactional one gets the screen the moment a step makes the policy ask (the page
// redraws on each change); an autonomous_trusted one never does.

import { api } from "./api.js";
import { el, when } from "./dom.js";

// How often the screen asks the server again whether the receipt on it has expired, once this
// browser's clock says it should have (the server's clock decides; the two may differ).
const EXPIRY_RECHECK_MS = 2000;

// A refusal that means the receipt is past its expires_at: only a new preview helps.
const isExpiry = (e) => e.reason === "RECEIPT_REFUSED" && (e.details || {}).why === "expired";
// A refusal that means a later change voided the receipt: only a new preview helps too.
const isVoided = (e) => e.reason === "SNAPSHOT_MISMATCH";

// Why a voided receipt no longer stands, in the words of `agenttx tx show` and MCP
// (agenttx.receipts.voided_because); the screen shows only an ACTIVE transaction's receipts.
const voidedBecause = (r, t) => `revision ${r.revision} moved to ${t.revision}`;

// One line of a receipt that is not refused (those have their own list below).
function receiptLine(r, t) {
  const by = r.decided_by ? ` by ${r.decided_by}` : "";
  if (r.status === "expired") {
    return `Receipt ${r.receipt_id} (revision ${r.revision}) expired at ${when(r.expires_at)}` +
      `${r.decided_by ? ` (approved${by})` : " before anyone decided it"}: preview again for a new receipt.`;
  }
  if (r.status === "voided") {
    return `Receipt ${r.receipt_id} (revision ${r.revision}) voided: ${voidedBecause(r, t)}` +
      `${r.decided_by ? ` (approved${by})` : ""}, so it can no longer be approved or refused: preview again for a new receipt.`;
  }
  return `Receipt ${r.receipt_id} (revision ${r.revision}) ${r.status}${by}, expires at ${when(r.expires_at)}.`;
}

export function approveSection(t, operations) {
  if (!operations.has("PreviewCommit") || !operations.has("ApproveCommit")) return null;
  if (!["ACTIVE"].includes(t.status)) return null;
  const reasons = t.approval_reasons || [];
  if (!reasons.length) return null;
  const out = el("div", { class: "preview", "aria-live": "polite" });
  const key = el("input", { type: "text", id: "approver-key", autocomplete: "off",
    placeholder: "approver: a name, or with API keys the approver's key" });
  let receipt = null;
  let expiryTimer = 0;
  // The receipt on the screen expired or was voided (the server said so, reading it or
  // refusing a decision): nothing can be decided on it any more; a new preview gives a new
  // receipt. `why` is the paragraph's class: "expired" or "voided".
  const lapsed = (why, message) => {
    clearTimeout(expiryTimer);
    decided();
    out.append(el("p", { class: why }, message),
      el("p", {}, "Preview commit again for a new receipt, then decide that one."));
  };
  const expired = (message) => lapsed("expired", message);
  // At the receipt's expires_at by this browser's clock, ask the server, whose clock decides.
  const watchExpiry = (id, expiresAt) => {
    clearTimeout(expiryTimer);
    const check = async () => {
      if (receipt !== id) return; // a newer preview, or decided
      let t2;
      try { t2 = await api.getTransaction(t.transaction_id); } catch { t2 = null; }
      const r = t2 && (t2.receipts || []).find((x) => x.receipt_id === id);
      if (receipt !== id) return;
      if (r && r.status === "expired") expired(`Receipt ${id} expired at ${when(r.expires_at)} before it was decided.`);
      else if (r && r.status === "voided") lapsed("voided", `Receipt ${id} was voided before it was decided: ${voidedBecause(r, t2)}.`);
      else if (!r || r.status === "issued") expiryTimer = setTimeout(check, EXPIRY_RECHECK_MS);
    };
    expiryTimer = setTimeout(check, Math.max(0, expiresAt * 1000 - Date.now()));
  };
  const failed = (e) => {
    if (isExpiry(e)) expired(e.message);
    else if (isVoided(e)) lapsed("voided", `Receipt ${receipt} was voided by a later change: ${e.message}`);
    else out.append(el("p", { class: "error" }, e.message));
  };
  const approve = el("button", { type: "button", disabled: true, onclick: async () => {
    try {
      const r = await api.approve(t.transaction_id, receipt, key.value);
      out.replaceChildren(el("p", { class: "ok" }, `Approved receipt ${receipt}.`),
        el("pre", {}, JSON.stringify(r, null, 2)));
      decided();
    } catch (e) {
      failed(e);
    }
  } }, "Approve this change");
  const canRefuse = operations.has("RefuseCommit");
  // 4096 bytes is the server's limit; maxlength counts characters, the server checks bytes.
  const reason = el("textarea", { id: "refuse-reason", rows: "2", maxlength: "4096",
    placeholder: "why it is refused, and what would make it acceptable (the agent reads it)" });
  const refuse = el("button", { type: "button", disabled: true, onclick: async () => {
    if (!reason.value.trim()) {
      out.append(el("p", { class: "error" }, "Say why the change is refused: the reason is required."));
      reason.focus();
      return;
    }
    try {
      const r = await api.refuse(t.transaction_id, receipt, key.value, reason.value);
      out.replaceChildren(
        el("p", { class: "refused" }, `Refused receipt ${receipt}: ${r.reason}`),
        el("p", {}, "The transaction stays open; its agent is told who refused and why when it commits."),
        el("pre", {}, JSON.stringify(r, null, 2)));
      decided();
    } catch (e) {
      failed(e);
    }
  } }, "Refuse this change");
  // A receipt is decided once (or expires, or is voided): then both buttons wait for a new preview.
  const decided = () => { clearTimeout(expiryTimer); receipt = null; approve.disabled = true; refuse.disabled = true; };
  const preview = el("button", { type: "button", onclick: async () => {
    try {
      const p = await api.preview(t.transaction_id);
      receipt = p.receipt_id || (p.receipt && p.receipt.receipt_id) || "";
      out.replaceChildren(
        el("p", {}, `Receipt ${receipt} for revision ${p.revision ?? t.revision}: approve it to let commit go ahead${canRefuse ? ", or refuse it saying why" : ""}.`),
        p.expires_at ? el("p", { class: "expires" }, `It expires at ${when(p.expires_at)}: decide before then, or preview again.`) : null,
        el("pre", {}, JSON.stringify(p, null, 2)));
      approve.disabled = !receipt;
      refuse.disabled = !receipt;
      if (receipt && p.expires_at) watchExpiry(receipt, Number(p.expires_at));
    } catch (e) {
      out.replaceChildren(el("p", { class: "error" }, e.message));
    }
  } }, "Preview commit");
  // The transaction's receipts (GetTransaction's receipts, newest first): the refused ones
  // with who refused and why; the others issued, approved, expired (the server's clock) or
  // voided (the transaction moved past them).
  const refusals = (t.receipts || []).filter((r) => r.status === "refused");
  const history = refusals.length
    ? el("ul", { class: "refusals" }, ...refusals.map((r) => el("li", {},
      `Receipt ${r.receipt_id} (revision ${r.revision}) refused by ${r.decided_by}: ${r.reason}`)))
    : null;
  const others = (t.receipts || []).filter((r) => r.status !== "refused");
  const receipts = others.length
    ? el("ul", { class: "receipts" }, ...others.map((r) => el("li", { class: `r-${r.status}` }, receiptLine(r, t))))
    : null;
  return el("section", { id: "approve" },
    el("h2", {}, canRefuse ? "Preview, approve or refuse" : "Preview and approve"),
    el("p", { class: "explain" }, `Commit of this transaction needs another person's approval (${reasons.join("; ")}). `,
      "Preview shows exactly what it would change and gives a receipt bound to that change; an ",
      "approver approves the receipt once", canRefuse ? ", or refuses it with a reason the agent reads" : "",
      ". If the transaction moves on, preview again."),
    el("div", { class: "row" }, preview, el("label", { for: "approver-key" }, "Approver "), key, approve),
    canRefuse
      ? el("div", { class: "row" }, el("label", { for: "refuse-reason" }, "Reason "), reason, refuse)
      : null,
    receipts,
    history,
    out);
}
