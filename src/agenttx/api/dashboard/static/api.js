// The dashboard's one client of the /v1 API: every request and event stream goes through here.

// A server with API keys (--api-keys) answers 401 without one: the page then asks for a key,
// keeps it for this tab only (sessionStorage) and sends it with every call. A browser's
// EventSource cannot send it, so with a key the same event stream is read through fetch.
const KEY = "agenttx-api-key";
export const keys = {
  get: () => sessionStorage.getItem(KEY) || "",
  set: (k) => (k ? sessionStorage.setItem(KEY, k) : sessionStorage.removeItem(KEY)),
  onMissing: () => {},
};

async function call(method, path, body, bearer) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const key = bearer || keys.get();
  if (key) init.headers.authorization = `Bearer ${key}`;
  const response = await fetch(path, init);
  if (response.status === 401 && !bearer) keys.onMissing();
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const e = data.error || {};
    const err = new Error(e.message || `${method} ${path}: HTTP ${response.status}`);
    err.status = response.status;
    err.reason = e.reason;
    err.details = e.details || {};
    err.continuation = e.continuation;
    throw err;
  }
  return data;
}

const tx = (id) => `/v1/transactions/${encodeURIComponent(id)}`;

export const api = {
  // One page of the transactions the filters match, newest first; `token` continues.
  listTransactions({ status = "", agent = "", tenant = "", label = "", since = "" } = {}, token = "", size = 100) {
    const q = new URLSearchParams({ page_size: String(size), newest_first: "true" });
    if (status) q.append("status", status);
    if (agent) q.set("agent_id", agent);
    if (tenant) q.set("tenant", tenant);
    if (label) q.set("label", label);
    if (since) q.set("created_after", String(Date.now() / 1000 - Number(since)));
    if (token) q.set("page_token", token);
    return call("GET", `/v1/transactions?${q}`);
  },
  getTransaction: (id) => call("GET", tx(id)),
  verifyAudit: (id) => call("GET", `${tx(id)}/audit`),
  rollback: (id, reason) => call("POST", `${tx(id)}/rollback`, { reason }),
  // The effects operations and the safety ones: present iff the server's OpenAPI document
  // lists them (ListEffects, RetryEffect, PreviewCommit, ApproveCommit, RefuseCommit).
  listEffects: (id) => call("GET", `${tx(id)}/effects`),
  retryEffect: (id, effectId) => call("POST", `${tx(id)}/effects/${encodeURIComponent(effectId)}/retry`, {}),
  preview: (id) => call("POST", `${tx(id)}/preview`, {}),
  // Without keys the approver is named; with keys it is the approver's own key (sent for this
  // call only), and the server takes the approver from it.
  approve: (id, receiptId, approver) => keys.get()
    ? call("POST", `${tx(id)}/approve`, { receipt_id: receiptId }, approver)
    : call("POST", `${tx(id)}/approve`, { receipt_id: receiptId, principal: approver, roles: ["approver"] }),
  // The same for a refusal, with its reason (RefuseCommit).
  refuse: (id, receiptId, approver, reason) => keys.get()
    ? call("POST", `${tx(id)}/refuse`, { receipt_id: receiptId, reason }, approver)
    : call("POST", `${tx(id)}/refuse`, { receipt_id: receiptId, reason, principal: approver, roles: ["approver"] }),
  async operations() {
    const doc = await call("GET", "/openapi.json");
    const ids = new Set();
    for (const item of Object.values(doc.paths || {})) {
      for (const op of Object.values(item)) ids.add(op.operationId);
    }
    return ids;
  },
  // Server-sent events; `onEvent` gets each TransactionEvent's fields.
  events(id, onEvent, onState) {
    if (keys.get()) return keyedStream(id ? `${tx(id)}/events` : "/v1/events", onEvent, onState);
    const source = new EventSource(id ? `${tx(id)}/events` : "/v1/events");
    source.addEventListener("transaction", (m) => onEvent(JSON.parse(m.data)));
    source.onopen = () => onState("live");
    source.onerror = () => onState(source.readyState === EventSource.CLOSED ? "ended" : "reconnecting…");
    return source;
  },
};

// The event stream with a key: fetch can send the Authorization header that EventSource
// cannot, and its body is the same stream, read line by line. A dropped connection reconnects
// after 2 s, as EventSource does. The stream ends for good on a 401, or on the server's last
// `error` event (a reload revoked the key, or left it unable to read this transaction): the
// page then asks for a key (`onMissing`), and a new key opens a new stream.
function keyedStream(path, onEvent, onState) {
  const aborted = new AbortController();
  let stopped = false;
  const refused = (state) => {
    stopped = true;
    onState(state);
    keys.onMissing();
  };
  const run = async () => {
    while (!stopped) {
      try {
        const response = await fetch(path, {
          headers: { authorization: `Bearer ${keys.get()}`, accept: "text/event-stream" },
          signal: aborted.signal,
        });
        if (response.status === 401) return refused("key refused");
        // 204: the transaction has ended and its last state was already sent (EventSource
        // stops on it too).
        if (response.status === 204) { stopped = true; return onState("ended"); }
        if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
        onState("live");
        await readEvents(response.body, (event, data) => {
          if (event === "transaction") onEvent(JSON.parse(data));
          if (event === "error") {
            const code = (JSON.parse(data).error || {}).code;
            refused(code === "UNAUTHENTICATED" ? "key refused" : "ended");
          }
        });
      } catch (e) {
        if (aborted.signal.aborted) return;
      }
      if (stopped) return;
      onState("reconnecting…");
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  };
  run();
  return { close: () => { stopped = true; aborted.abort(); } };
}

// Server-sent events from a response body: `onMessage(event, data)` per event, until the body
// ends (comment lines, such as the server's keep-alives, are skipped).
async function readEvents(body, onMessage) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = "message";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, "");
      buffer = buffer.slice(end + 1);
      if (line === "") {
        if (data.length) onMessage(event, data.join("\n"));
        event = "message";
        data = [];
      } else if (line.startsWith("event:")) {
        event = line.slice(6).trim();
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }
}
