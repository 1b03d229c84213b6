// The dashboard: a list of transactions (newest first, filtered, live) and a page per
// transaction. The URL fragment names the screen: #/ or #/tx/<id>.

import { api, keys } from "./api.js";
import { approveSection } from "./approve.js";
import { effectsBody } from "./effects.js";
import { badge, el, when } from "./dom.js";
import { dependencyGraph, timeline } from "./graph.js";

const main = document.getElementById("main");
const liveBadge = document.getElementById("live");
const STATUSES = ["ACTIVE", "EXECUTING", "ROLLING_BACK", "COMMITTING", "COMMITTED", "ROLLED_BACK", "FAILED", "COMPENSATING", "COMPENSATED"];
const ENDED = ["COMMITTED", "ROLLED_BACK", "FAILED", "COMPENSATED"]; // terminal: no Abort button
const SINCE = { "": "any time", 900: "last 15 min", 3600: "last hour", 86400: "last 24 h" };
let stream = null;
let visits = 0; // pages of a transaction opened so far: tells the current one from earlier ones
let operations = new Set();
const filters = { status: "", agent: "", tenant: "", label: "", since: "" };

function setLive(state) {
  liveBadge.textContent = state;
  liveBadge.className = `live ${state === "live" ? "on" : ""}`;
}

function openStream(id, onEvent) {
  closeStream();
  stream = api.events(id, onEvent, setLive);
  return stream;
}

function closeStream() {
  if (stream) stream.close();
  stream = null;
}

function debounce(fn, ms) {
  let t = 0;
  return () => { clearTimeout(t); t = setTimeout(fn, ms); };
}

// ---------------------------------------------------------------- the list

async function showList() {
  document.title = "AgentTx · transactions";
  const tbody = el("tbody");
  const count = el("p", { class: "count", role: "status" });
  let pages = 1; // how many pages are shown: a live reload keeps the older ones the user asked for
  let nextToken = "";
  const older = el("button", { type: "button", hidden: true, onclick: () => { pages += 1; load(); } }, "Show older");
  const load = async () => {
    let rows = [];
    try {
      let token = "";
      for (let i = 0; i < pages; i++) {
        const page = await api.listTransactions(filters, token);
        rows.push(...page.transactions);
        token = page.next_page_token;
        if (!token) break;
      }
      nextToken = token;
    } catch (e) {
      count.textContent = e.message;
      return;
    }
    older.hidden = !nextToken;
    tbody.replaceChildren(...rows.map((t) => el("tr", { "data-tx": t.transaction_id },
      el("td", {}, el("a", { href: `#/tx/${encodeURIComponent(t.transaction_id)}` }, t.transaction_id)),
      el("td", {}, badge(t.status)),
      el("td", {}, t.agent_id),
      el("td", {}, t.tenant || ""),
      el("td", { class: "num" }, t.next_step_id || "–"),
      el("td", {}, t.labels.join(", ")),
      el("td", {}, when(t.created_at)),
      el("td", {}, when(t.updated_at)),
      el("td", { class: "reason" }, t.abort_reason))));
    count.textContent = `${rows.length} transaction${rows.length === 1 ? "" : "s"}, newest first`;
  };
  const reload = debounce(load, 150);
  const select = (name, options) => el("select", { id: `f-${name}`, onchange: (e) => { filters[name] = e.target.value; pages = 1; load(); } },
    ...Object.entries(options).map(([v, label]) => el("option", { value: v, selected: filters[name] === v }, label)));
  const text = (name, placeholder) => el("input", { id: `f-${name}`, type: "search", placeholder, value: filters[name],
    oninput: (e) => { filters[name] = e.target.value.trim(); pages = 1; reload(); } });
  main.replaceChildren(
    el("h2", {}, "Transactions"),
    el("p", { class: "explain" }, "Every transaction an agent ran through this server. ",
      "Open one to see its steps, rewinds and dependency graph. The list updates as agents work."),
    el("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() },
      el("label", { for: "f-status" }, "Status"), select("status", { "": "any", ...Object.fromEntries(STATUSES.map((s) => [s, s])) }),
      el("label", { for: "f-agent" }, "Agent"), text("agent", "agent id"),
      el("label", { for: "f-tenant" }, "Tenant"), text("tenant", "tenant"),
      el("label", { for: "f-label" }, "Label"), text("label", "label"),
      el("label", { for: "f-since" }, "Created"), select("since", SINCE)),
    count,
    el("table", { class: "list" },
      el("thead", {}, el("tr", {}, ...["transaction", "status", "agent", "tenant", "next", "labels", "created", "updated", "reason"].map((h) => el("th", { scope: "col" }, h)))),
      tbody),
    older);
  await load();
  openStream(null, reload);
}

// ---------------------------------------------------------------- one transaction

function section(id, title, explain, ...body) {
  return el("section", { id }, el("h2", {}, title), explain ? el("p", { class: "explain" }, explain) : null, ...body);
}

function facts(t) {
  const rows = [
    ["status", badge(t.status)], ["agent", t.agent_id], ["tenant", t.tenant || "default"], ["next step", t.next_step_id || "– (ended)"],
    ["revision / epoch", `${t.revision} / ${t.epoch}`], ["isolation", t.isolation],
    ["global resets used", `${t.global_resets} of ${t.policy.max_global_resets}`],
    ["created", when(t.created_at)], ["updated", when(t.updated_at)],
  ];
  if (t.abort_reason) rows.push(["abort reason", t.abort_reason]);
  if (t.requires_human) rows.push(["needs a person", "a compensation kept failing"]);
  if (t.outcome_unknown_step) rows.push(["outcome unknown", `step ${t.outcome_unknown_step} awaits reconciliation`]);
  for (const [k, v] of Object.entries(t.metadata || {})) rows.push([`metadata ${k}`, v]);
  return el("dl", { class: "facts" }, ...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function rootCauses(t) {
  const items = (t.decisions || []).map((d) => {
    const s = t.steps[d.history_index];
    const cause = d.root_cause_step ? `root cause: step ${d.root_cause_step}` : "no earlier step to blame";
    return el("li", { class: "failure", "data-step": d.step_id },
      el("strong", {}, `Step ${d.step_id} (try ${d.attempt}, ${s ? s.tool_name : "?"}) failed`), " — ",
      s ? s.clean_hint : "", el("br"),
      `${d.strategy}${d.rollback_to_step ? ` → resumed at step ${d.rollback_to_step}` : ""}; ${cause}`,
      d.hint_key ? ` (the value of “${d.hint_key}”)` : "");
  });
  return items.length ? el("ul", { class: "failures" }, ...items) : el("p", {}, "No step has failed.");
}

function stepsTable(t) {
  return el("table", { class: "steps" },
    el("thead", {}, el("tr", {}, ...["step", "try", "tool", "status", "live", "arguments", "output / hint"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, ...t.steps.map((s) => el("tr", { class: s.live ? "" : "undone" },
      el("td", { class: "num" }, s.step_id), el("td", { class: "num" }, s.attempt), el("td", {}, s.tool_name),
      el("td", {}, badge(s.status)), el("td", {}, s.live ? "yes" : "no"),
      el("td", {}, el("code", {}, JSON.stringify(s.arguments))),
      el("td", {}, s.status === "SUCCESS" ? el("code", {}, JSON.stringify(s.output)) : s.clean_hint)))));
}

async function showTransaction(id) {
  const visit = ++visits; // this page's; the user may have moved on by the time a call returns
  let shown = 0; // the revision on the page
  document.title = `AgentTx · ${id}`;
  const page = el("div", { class: "tx" });
  main.replaceChildren(el("p", {}, el("a", { href: "#/" }, "← all transactions")), el("h2", { class: "txid" }, id), page);
  // Draws the page; returns the transaction's status (undefined if it could not be read).
  const render = async () => {
    let t;
    try {
      t = await api.getTransaction(id);
      shown = Number(t.revision);
    } catch (e) {
      page.replaceChildren(el("p", { class: "error" }, e.message));
      return undefined;
    }
    let audit = null;
    try {
      audit = (await api.verifyAudit(id)).results[0];
    } catch (e) {
      audit = { ok: false, reason: e.message, records: 0 };
    }
    const edgesLegend = el("p", { class: "legend" },
      el("span", { class: "k explicit" }, "explicit (a ${steps.N…} reference)"),
      el("span", { class: "k implicit" }, "implicit (an equal value under a matching key)"),
      el("span", { class: "k state" }, "state (read what an earlier step wrote)"),
      el("span", { class: "k root" }, "a failure's root cause"));
    page.replaceChildren(...[
      facts(t),
      approveSection(t, operations),
      section("failures", "Failures and their root causes",
        "For each failed step: its hint, what the rollback controller did, and the earlier step that produced the bad value.",
        rootCauses(t)),
      section("timeline", "Step timeline",
        "Every attempt in the order it ran. Green succeeded, red failed, faded ones were undone by a rewind; arcs go back to the step the agent resumed from.",
        el("div", { class: "scroll" }, timeline(t))),
      section("graph", "Dependency graph", "How data flowed between the live steps; a failed attempt points to its root cause.",
        edgesLegend, el("div", { class: "scroll" }, dependencyGraph(t))),
      section("constraints", "Constraints", "What the agent learned from failures; kept across rewinds and sent with every reply.",
        t.constraints.length ? el("ul", {}, ...t.constraints.map((c) => el("li", {}, c))) : el("p", {}, "None.")),
      section("context", "Context log", "The reasoning the agent sent with each live step.",
        t.context.length ? el("ul", {}, ...t.context.map((c) => el("li", {}, el("strong", {}, `step ${c.step_id} ${c.tool_name}: `), c.raw_context || "—"))) : el("p", {}, "Empty.")),
      section("effects", "Effects", "Emails, webhooks and other staged effects are released only after commit.",
        effectsBody(t, operations, render)),
      section("audit", "Audit chain", "Every event of the transaction is in a hash chain; an edited or missing record is named.",
        el("p", { class: audit.ok ? "ok" : audit.unchecked ? "warn" : "error" },
          audit.ok ? `intact: ${audit.records} records`
            : `${audit.unchecked ? "not checked" : "broken"}: ${audit.reason || "unknown"}${audit.first_bad ? ` (record ${audit.first_bad})` : ""}`)),
      section("history", "Every attempt", null, stepsTable(t)),
    ].filter(Boolean));
    if (!ENDED.includes(t.status)) {
      page.append(el("p", {}, el("button", { type: "button", onclick: async () => {
        if (!confirm(`Abort ${id}? Its changes are undone.`)) return;
        try { await api.rollback(id, "aborted from the dashboard"); } catch (e) { alert(e.message); }
        render();
      } }, "Abort this transaction")));
    }
    return t.status;
  };
  // An ended transaction never changes again and its stream has nothing more to say: the
  // page shows its final state and opens no stream (one would be reopened forever).
  const ended = () => { closeStream(); setLive("ended"); };
  const status = await render();
  if (visit !== visits || !location.hash.startsWith("#/tx/")) return undefined; // moved on
  if (ENDED.includes(status)) return ended();
  // Only a newer revision redraws: the stream's first event is the state just drawn, and a
  // redraw would drop what the user is doing on the page (a preview waiting for approval).
  const redraw = debounce(render, 100);
  const own = openStream(id, (e) => {
    if (!(Number(e.revision) <= shown)) redraw();
    // The transaction's last event: draw its final state, and stop before the server's
    // close would make the browser reconnect. Only if this page's stream is still the open one.
    if (ENDED.includes(e.status) && stream === own) ended();
  });
}

// ---------------------------------------------------------------- routing and keys

function route() {
  const m = location.hash.match(/^#\/tx\/(.+)$/);
  if (m) showTransaction(decodeURIComponent(m[1]));
  else showList();
}

document.addEventListener("keydown", (e) => {
  const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement?.tagName);
  if (e.key === "/" && !typing) {
    e.preventDefault();
    document.getElementById("f-agent")?.focus();
  } else if (e.key === "Backspace" && !typing && location.hash.startsWith("#/tx/")) {
    location.hash = "#/";
  }
});

window.addEventListener("hashchange", route);
api.operations().then((ids) => { operations = ids; }).catch(() => {}).finally(route);

// A server with API keys: ask for one once a call is refused, then start again with it.
const keyForm = document.getElementById("key-form");
if (keyForm) {
  keys.onMissing = () => { keyForm.hidden = false; document.getElementById("api-key").focus(); };
  keyForm.addEventListener("submit", (e) => {
    e.preventDefault();
    keys.set(document.getElementById("api-key").value.trim());
    keyForm.hidden = true;
    route();
  });
}
