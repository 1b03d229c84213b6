// The transaction page's two drawings: the step timeline (every attempt in order, rewinds as
// arcs back to the step the agent resumed from) and the dependency graph (explicit, implicit
// and state edges; each failure's root-cause path highlighted).

import { svg } from "./dom.js";

const BOX_W = 120, BOX_H = 46, GAP = 26;
const LINE_H = 16; // one line of text in a box
const LINE_CHARS = 16; // what fits on one line of a box at 12px

// ``text`` in lines that fit a box, at spaces where it can, at most ``maxLines`` (the last
// one ending in … if the text is longer still: the box's title always has the whole text).
function wrap(text, maxLines) {
  const lines = [];
  let rest = String(text);
  while (rest.length > LINE_CHARS && lines.length < maxLines - 1) {
    let cut = rest.lastIndexOf(" ", LINE_CHARS);
    if (cut <= 0) cut = LINE_CHARS;
    lines.push(rest.slice(0, cut).trimEnd());
    rest = rest.slice(cut).trimStart();
  }
  lines.push(rest.length > LINE_CHARS ? `${rest.slice(0, LINE_CHARS - 1)}…` : rest);
  return lines;
}

function decisionOf(t, i) {
  return (t.decisions || []).find((d) => d.history_index === i);
}

function arrowDefs() {
  const marker = (id, cls) =>
    svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      svg("path", { d: "M0,0 L10,5 L0,10 z", class: cls }));
  return svg("defs", {}, marker("arrow", "arrowhead"), marker("arrow-root", "arrowhead root"));
}

export function timeline(t) {
  const attempts = t.steps;
  const width = Math.max(1, attempts.length) * (BOX_W + GAP) + GAP;
  const top = 70;
  const height = top + BOX_H + 30;
  const root = svg("svg", { class: "timeline", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `timeline of ${attempts.length} step attempts` }, arrowDefs());
  const x = (i) => GAP + i * (BOX_W + GAP);
  // Where each step id was last drawn before attempt i (an arc's target).
  const lastIndex = (stepId, before) => {
    for (let j = before - 1; j >= 0; j--) if (attempts[j].step_id === stepId) return j;
    return -1;
  };
  attempts.forEach((s, i) => {
    const d = decisionOf(t, i);
    const cls = `attempt s-${s.status.toLowerCase()}${s.live ? " live" : " undone"}`;
    const g = svg("g", { class: cls, "data-step": s.step_id, "data-attempt": s.attempt },
      svg("title", {}, `step ${s.step_id} try ${s.attempt}: ${s.tool_name} ${s.status}${s.clean_hint ? " — " + s.clean_hint : ""}`),
      svg("rect", { x: x(i), y: top, width: BOX_W, height: BOX_H, rx: 6 }),
      svg("text", { x: x(i) + 8, y: top + 18, class: "label" }, `#${s.step_id}.${s.attempt} ${s.status}`),
      svg("text", { x: x(i) + 8, y: top + 36, class: "tool" }, wrap(s.tool_name, 1)[0]));
    root.append(g);
    if (d) {
      root.append(svg("text", { x: x(i) + 4, y: top + BOX_H + 16, class: "strategy" }, d.strategy));
      const target = d.rollback_to_step || (d.strategy === "GLOBAL_RESET" ? 1 : 0);
      const j = target ? lastIndex(target, i + 1) : -1;
      if (j >= 0 && d.strategy !== "ABORT") {
        const x1 = x(i) + BOX_W / 2, x2 = x(j) + BOX_W / 2;
        const lift = Math.min(60, 20 + (i - j) * 8);
        root.append(svg("path", { class: "arc", d: `M${x1},${top} C${x1},${top - lift} ${x2},${top - lift} ${x2},${top - 2}`,
          "marker-end": "url(#arrow)" }, svg("title", {}, `${d.strategy}: rewound to step ${target}`)));
      }
    }
  });
  return root;
}

// Nodes: the live steps, plus each failed attempt (drawn after them, in red). Edges: the live
// graph's (explicit solid, implicit dashed, state dotted) and, for each failure, the path to
// its root cause highlighted.
export function dependencyGraph(t) {
  const live = t.steps.filter((s) => s.live && s.status === "SUCCESS");
  const failed = t.steps.map((s, i) => [s, i]).filter(([s]) => s.status === "FAILED" || s.status === "OUTCOME_UNKNOWN");
  const nodes = [
    ...live.map((s) => ({ key: `s${s.step_id}`, step: s, label: `step ${s.step_id}` })),
    ...failed.map(([s, i]) => ({ key: `f${i}`, step: s, label: `step ${s.step_id} try ${s.attempt}`, failed: true })),
  ];
  const causes = (n) => (n.failed ? [] : (t.decisions || []).filter((d) => d.root_cause_step === n.step.step_id));
  // Each node's text: its label, its tool, and, for a root cause, what it produced — the
  // tool name stays, and the cause gets lines of its own rather than being cut.
  const linesOf = (n) => {
    const rootOf = causes(n);
    return {
      tool: wrap(n.step.tool_name, 2),
      cause: rootOf.length ? wrap(`root cause: ${rootOf[0].hint_key || "value"}`, 4) : [],
    };
  };
  const boxH = (n) => { const l = linesOf(n); return 14 + LINE_H * (1 + l.tool.length + l.cause.length); };
  const pos = new Map();
  const heights = new Map();
  const width = Math.max(1, nodes.length) * (BOX_W + GAP) + GAP;
  const y = 90;
  nodes.forEach((n, i) => pos.set(n.key, GAP + i * (BOX_W + GAP)));
  // Undone root causes are added below: their heights join then.
  nodes.forEach((n) => heights.set(n.key, boxH(n)));
  const tallest = () => Math.max(BOX_H, ...heights.values());
  const root = svg("svg", { class: "graph", width, viewBox: `0 0 ${width} 0`, role: "img",
    "aria-label": "dependency graph" }, arrowDefs());
  const curve = (fromKey, toKey, cls, title, below) => {
    const x1 = pos.get(fromKey) + BOX_W / 2, x2 = pos.get(toKey) + BOX_W / 2;
    const y1 = below ? y + heights.get(fromKey) : y, y2 = below ? y + heights.get(toKey) : y;
    const lift = (below ? 1 : -1) * Math.min(70, 24 + Math.abs(x2 - x1) / 8);
    const low = below ? Math.max(y1, y2) : Math.min(y1, y2);
    root.append(svg("path", { class: cls, d: `M${x1},${y1} C${x1},${low + lift} ${x2},${low + lift} ${x2},${y2 + (below ? 2 : -2)}`,
      "marker-end": cls.includes("root") ? "url(#arrow-root)" : "url(#arrow)" }, svg("title", {}, title)));
  };
  (t.edges || []).forEach((e, i) => {
    const kind = (t.edge_kinds || [])[i] || "explicit";
    if (pos.has(`s${e.from_step}`) && pos.has(`s${e.to_step}`)) {
      curve(`s${e.from_step}`, `s${e.to_step}`, `edge ${kind}`, `${kind}: ${e.key} (step ${e.from_step} → ${e.to_step})`, false);
    }
  });
  for (const d of t.decisions || []) {
    const from = `f${d.history_index}`;
    if (!d.root_cause_step || !pos.has(from)) continue;
    const rootStep = t.steps.filter((s) => s.step_id === d.root_cause_step && s.status === "SUCCESS").pop();
    let rootKey = `s${d.root_cause_step}`;
    if (!pos.has(rootKey) && rootStep) {
      // The root cause was rewound too: draw it as an undone node.
      rootKey = `u${d.root_cause_step}`;
      pos.set(rootKey, GAP + nodes.length * (BOX_W + GAP));
      const node = { key: rootKey, step: rootStep, label: `step ${d.root_cause_step} (undone)`, undone: true };
      nodes.push(node);
      heights.set(rootKey, boxH(node));
      root.setAttribute("width", String(Number(root.getAttribute("width")) + BOX_W + GAP));
    }
    if (pos.has(rootKey)) {
      curve(from, rootKey, "edge root", `root cause of step ${d.step_id}'s failure: step ${d.root_cause_step} produced ${d.hint_key || "the value"}`, true);
    }
  }
  for (const n of nodes) {
    const { tool, cause } = linesOf(n);
    const cls = `node${n.failed ? " failed" : ""}${n.undone ? " undone" : ""}${cause.length ? " root-cause" : ""}`;
    const x0 = pos.get(n.key) + 8;
    const text = (line, i, kind) => svg("text", { x: x0, y: y + 18 + LINE_H * i, class: kind }, line);
    const title = [`${n.label}: ${n.step.tool_name}`, cause.length ? cause.join(" ") : "", n.step.clean_hint]
      .filter(Boolean).join(" — ");
    root.append(svg("g", { class: cls, "data-step": n.step.step_id },
      svg("title", {}, title),
      svg("rect", { x: pos.get(n.key), y, width: BOX_W, height: heights.get(n.key), rx: 6 }),
      text(n.label, 0, "label"),
      ...tool.map((line, i) => text(line, 1 + i, "tool")),
      ...cause.map((line, i) => text(line, 1 + tool.length + i, "cause"))));
  }
  // Room below the tallest box for the root-cause arcs.
  const height = y + tallest() + 80;
  root.setAttribute("height", String(height));
  root.setAttribute("viewBox", `0 0 ${root.getAttribute("width")} ${height}`);
  return root;
}
