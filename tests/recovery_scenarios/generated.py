"""A generated suite beyond the reference's twelve scenarios (issue 11, point 6).

``generate(seed, count)`` draws scenarios from ``random.Random(seed)``: a random step graph
(state writes, explicit references, renamed keys, implicit edges, files, staged emails, an
outside reservation with a compensation) and one fault *family*:

- ``root-ref`` / ``root-rename`` / ``root-implicit``: step r produces a wrong customer id until
  the agent has learned (a hint naming ``customer_id``); step f's foreign-key insert fails on it.
  The value reaches f through ``${steps.r.value}``, through a rename step (``account_id``), or
  copied by the agent (an implicit edge from r's ``id``);
- ``two-roots``: the same for a customer and, independently, a vendor (``vendor_id``), at two
  different producers and two different failing steps;
- ``transient-burst``: step f fails 1–4 times in a row with transient errors, then succeeds;
- ``compensation-failure``: a root-cause failure whose rewind compensates a reservation, and
  that compensation fails once before it succeeds;
- ``typo``: the agent's first attempt of a random step is malformed (misspelled or missing
  argument — for a user tool, a misspelled optional one —, broken JSON, misspelled tool name,
  a literal key that does not exist);
- ``repeated-typo``: two or three malformed attempts in a row, at step 1, 2 or a random step
  (at step 1 the replay budget is max(1, ⌈2·1·1⌉) = 2);
- ``typo+root``: a typo and a root cause in one run;
- the errors framework tools raise and downstream servers answer (issue 25), each on an
  argument typed at a random step, fixed on the next attempt: ``path-escape`` (``fs.read`` of
  ``../`` and a file an earlier step wrote), ``user-key-error`` (a user tool's ``KeyError`` on
  its own argument's value), ``downstream-text`` (an MCP server's ``no such key: zzz``, raised
  as the gateway raises it) and ``unrecognised-error`` (a bare ``ValueError``).

**The oracle** knows, when a failure shows, where its cause is, and works in the same
transaction model (rewinding to step t undoes every step ≥ t). Its tool calls: N, plus for each
failure the failed call and the re-runs its cause needs — ``f − r`` for a cause at r (redo r …
f − 1, then f), 0 for a cause in the failing step itself (a typo, a transient error). That is
the least any recovery can spend without knowing the future.

``run_generated`` runs one scenario through AgentTx with a scripted agent (it fixes what a hint
names and nothing else) and counts tool calls, the strategies used and the bad effects:
duplicate or leaked emails, orphaned files and reservations the final state should not hold.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import agenttx
from agenttx.gateway.tools import DownstreamToolError

from .runner import list_files, read_jsonl
from .tools import ToolFailure

FAMILIES = (
    "root-ref",
    "root-rename",
    "root-implicit",
    "two-roots",
    "transient-burst",
    "compensation-failure",
    "typo",
    "repeated-typo",
    "typo+root",
    "path-escape",
    "user-key-error",
    "downstream-text",
    "unrecognised-error",
)
# Each framework-error family → the filler its failing step runs once the agent gets it right.
FRAMEWORK_FAMILIES = {
    "path-escape": "readback",
    "user-key-error": "price",
    "downstream-text": "remote",
    "unrecognised-error": "settle",
}
TYPOS = ("misspelled-argument", "missing-argument", "malformed-json", "unknown-tool", "missing-key")
MAX_CALLS = 10_000  # a safety stop: the engine's bound is far below this


@dataclass(frozen=True)
class Root:
    """A wrong value produced at step ``producer`` and caught at step ``fails_at``."""

    key: str  # the foreign-key column the hint names, e.g. customer_id
    table: str  # the referenced table
    good: str
    bad: str
    producer: int  # r
    fails_at: int  # f > r
    via: str  # "ref" | "rename" | "implicit"
    rename_at: int = 0  # the rename step (via "rename"), r < rename_at < f
    draft_at: int = 0  # a step that writes drafts/<value>.json from r's value, or 0


# The directory gen.find answers from: a name the agent may get wrong, and the right one.
DIRECTORY = {
    ("customers", "Acme Corp"): "c-404",
    ("customers", "Acme GmbH"): "c-1",
    ("vendors", "Globex Inc"): "v-404",
    ("vendors", "Globex AG"): "v-1",
}
_NAMES = {"customers": ("Acme Corp", "Acme GmbH"), "vendors": ("Globex Inc", "Globex AG")}

TRANSIENT_ERRORS = (
    "httpx.ReadTimeout: timed out",
    "HTTPStatusError: Server error '503 Service Unavailable' for url "
    "'https://payments.example.com/v1/charge'",
    "anthropic.RateLimitError: Error code: 429 - {'type': 'error', 'error': {'type': "
    "'rate_limit_error', 'message': 'Number of request tokens has exceeded your per-minute "
    "rate limit'}}",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
)


@dataclass(frozen=True)
class Generated:
    """One scenario: N steps, a fault family and where its faults are."""

    seed: int
    index: int
    family: str
    steps: int  # N
    fillers: dict[int, str]  # step → filler kind for steps no fault uses
    roots: tuple[Root, ...] = ()
    burst_at: int = 0  # transient: the failing step, 0 if none
    burst: int = 0  # transient: failures before the success
    typo_at: int = 0  # typo: the step whose first attempts are malformed, 0 if none
    typos: tuple[str, ...] = ()  # the malformed attempts in order, one of TYPOS each
    reserve_at: int = 0  # compensation-failure: the reservation undone by the rewind
    undo_failures: int = 0  # compensation-failure: failed tries of that undo before it works
    kv_source: int = 0  # missing-key typo: an earlier kv.put step whose key the fix reads
    file_source: int = 0  # path-escape: an earlier fs.write step whose file the fix reads

    @property
    def id(self) -> str:
        return f"gen-{self.seed}-{self.index:03d}-{self.family}"

    def oracle_calls(self) -> int:
        """N plus, per failure, the failed call and the re-runs its cause needs."""
        calls = self.steps
        for root in self.roots:
            calls += 1 + (root.fails_at - root.producer)
        calls += self.burst  # each failed try is retried in place
        calls += len(self.typos)  # so is each malformed attempt
        return calls

    # ------------------------------------------------------------------ the agent's plan

    def plan(self, i: int, agent: Agent) -> tuple[str, Any]:
        """The call the agent sends for step ``i``: (tool, arguments as a dict or JSON text)."""
        if i == self.typo_at and agent.typos_made < len(self.typos):
            return self._typo_call(i, self.typos[agent.typos_made])
        for root in self.roots:
            call = self._root_call(i, root, agent)
            if call is not None:
                return call
        if i == self.burst_at:
            return "gen.flaky", {"operation": "charge", "amount": 1200}
        return self._filler_call(i)

    def _root_call(self, i: int, root: Root, agent: Agent) -> tuple[str, Any] | None:
        learned = root.key in agent.learned
        if i == root.producer:
            if root.via == "implicit":
                return "gen.find", {"table": root.table, "name": _NAMES[root.table][learned]}
            produced = root.good if learned else root.bad
            return "kv.put", {"key": f"session/{root.table}", "value": produced}
        if i == root.rename_at:
            return "gen.rename", {
                "value": f"${{steps.{root.producer}.value}}",
                "as_key": "account_id",
            }
        if i == root.draft_at:
            return "fs.write", {
                "path": f"drafts/{root.table}-${{steps.{root.producer}.value}}.json",
                "contents": '{"status":"draft"}',
            }
        if i == root.fails_at:
            if root.via == "ref":
                value: Any = f"${{steps.{root.producer}.value}}"
            elif root.via == "rename":
                value = f"${{steps.{root.rename_at}.account_id}}"
            else:  # the agent copies the id step r found: an implicit edge
                value = agent.outputs[root.producer]["id"]
            table = "invoices" if root.table == "customers" else "bills"
            return "record.insert", {
                "table": table,
                "id": f"{table[:3]}-{i}",
                "fields": {root.key: value, "amount": 100 * i},
                "references": {root.key: root.table},
            }
        return None

    def _filler_call(self, i: int) -> tuple[str, Any]:
        kind = self.fillers.get(i, "kv")
        if i == 1:
            return "record.insert", {"table": "customers", "id": "c-1", "fields": {"name": "Acme"}}
        if i == 2:
            return "record.insert", {"table": "vendors", "id": "v-1", "fields": {"name": "Globex"}}
        if kind == "ref":  # an explicit edge to the latest earlier kv filler
            source = max(j for j in range(1, i) if self._is_kv(j))
            return "kv.put", {"key": f"wf/copy-{i}", "value": f"${{steps.{source}.value}}"}
        if kind == "file":
            return "fs.write", {"path": f"reports/step-{i}.txt", "contents": f"report {i}"}
        if kind == "email":
            return "effect.stage", {
                "channel": "email",
                "payload": {"template": "step-complete", "step": i},
                "idempotency_key": f"wf-{i}",
            }
        if kind == "reserve":
            return "gen.reserve", {"item": f"room-{i}"}
        if kind == "note":
            return "gen.note", {"label": f"n{i}", "text": f"note {i}", "tag": "wf"}
        if kind == "read" and self.kv_source:
            return "kv.get", {"key": f"wf/step-{self.kv_source}"}
        if kind == "readback":
            return "fs.read", {"path": f"reports/step-{self.file_source}.txt"}
        if kind == "price":
            return "gen.price", {"sku": "sku-7"}
        if kind == "remote":
            return "gen.remote", {"key": "color"}
        if kind == "settle":
            return "gen.settle", {"period": "2026-11"}
        return "kv.put", {"key": f"wf/step-{i}", "value": 1000 + i}

    def _is_kv(self, j: int) -> bool:
        # fillers hold only steps no fault uses; the typo step's right call may differ
        return self.fillers.get(j) == "kv" and j != self.typo_at

    def _typo_call(self, i: int, typo: str) -> tuple[str, Any]:
        """The right call of step ``i``, malformed the way ``typo`` says."""
        tool, args = self._filler_call(i)
        # The framework errors: a value the tool itself refuses, typed at the step.
        if typo == "path-escape":
            return tool, {"path": f"../{args['path']}"}
        if typo == "user-key-error":
            return tool, {"sku": "sku-zzz"}
        if typo == "downstream-text":
            return tool, {"key": "zzz"}
        if typo == "unrecognised-error":
            return tool, {"period": "2026-13"}
        first = next(iter(args))  # a required argument of every filler tool
        if typo == "misspelled-argument":
            # a user tool's optional argument (pydantic: extra_forbidden), else a required one
            name = "tag" if "tag" in args else first
            typed = name[1] + name[0] + name[2:]
            return tool, {(typed if k == name else k): v for k, v in args.items()}
        if typo == "missing-argument":
            return tool, {k: v for k, v in args.items() if k != first}
        if typo == "malformed-json":
            return tool, json.dumps(args)[:-1]
        if typo == "unknown-tool":
            return tool.replace(".", "_", 1), args
        return "kv.get", {"key": f"wf/step-{self.kv_source}-typo"}  # missing-key

    # ------------------------------------------------------------------ expected final state

    def final_calls(self) -> dict[int, tuple[str, Any]]:
        agent = Agent(learned={r.key for r in self.roots}, typos_made=len(self.typos))
        calls: dict[int, tuple[str, Any]] = {}
        for i in range(1, self.steps + 1):
            tool, args = self.plan(i, agent)
            calls[i] = (tool, args)
            if tool == "gen.find":
                agent.outputs[i] = {"id": DIRECTORY[(args["table"], args["name"])]}
        return calls

    def expected_files(self) -> set[str]:
        files = set()
        good = {r.producer: r.good for r in self.roots}
        for tool, args in self.final_calls().values():
            if tool == "fs.write":
                path = str(args["path"])
                for producer, value in good.items():
                    path = path.replace(f"${{steps.{producer}.value}}", value)
                files.add(path)
        return files

    def expected_reservations(self) -> Counter[str]:
        return Counter(
            args["item"] for tool, args in self.final_calls().values() if tool == "gen.reserve"
        )

    def expected_emails(self) -> set[str]:
        return {
            args["idempotency_key"]
            for tool, args in self.final_calls().values()
            if tool == "effect.stage"
        }


@dataclass
class Agent:
    """What the scripted agent knows: the keys hints have named, how many of its malformed
    attempts it has made (it stops once it has made them all), the outputs of live steps."""

    learned: set[str] = field(default_factory=set)
    typos_made: int = 0
    outputs: dict[int, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- generation


def generate(seed: int, count: int) -> list[Generated]:
    """``count`` scenarios from ``seed``; families in turn, so every family is drawn alike."""
    rng = random.Random(seed)
    return [_one(rng, seed, i, FAMILIES[i % len(FAMILIES)]) for i in range(count)]


def _one(rng: random.Random, seed: int, index: int, family: str) -> Generated:
    n = rng.randint(14, 24) if family == "two-roots" else rng.randint(8, 24)
    roots: list[Root] = []
    used: set[int] = {1, 2}

    def free(lo: int, hi: int) -> int:
        pick = rng.choice([j for j in range(lo, hi + 1) if j not in used])
        used.add(pick)
        return pick

    def root(key: str, table: str, via: str, lo: int, hi: int, span: int = 2) -> Root:
        """A chain inside steps lo … hi, which no other fault uses yet."""
        span = max(span, 3 if via == "rename" else 2)
        producer = free(lo, hi - span)
        fails = free(producer + span, hi)
        rename = free(producer + 1, fails - 1) if via == "rename" else 0
        draft = 0
        if via != "implicit" and rng.random() < 0.6 and _gap(used, producer, fails):
            draft = free(producer + 1, fails - 1)
        good, bad = ("c-1", "c-404") if table == "customers" else ("v-1", "v-404")
        return Root(key, table, good, bad, producer, fails, via, rename, draft)

    vias = ("ref", "rename", "implicit")
    burst_at = burst = typo_at = reserve_at = undo_failures = 0
    typos: list[str] = []
    if family.startswith("root-"):
        roots.append(root("customer_id", "customers", family[5:], 3, n))
    elif family == "two-roots":
        # independent: each chain in its own half of the task, each via any path
        mid = n // 2 + 1
        roots.append(root("customer_id", "customers", rng.choice(vias), 3, mid))
        roots.append(root("vendor_id", "vendors", rng.choice(vias), mid + 1, n))
    elif family == "compensation-failure":
        roots.append(root("customer_id", "customers", "ref", 3, n, span=3))
        reserve_at = free(roots[0].producer + 1, roots[0].fails_at - 1)
        undo_failures = 1
    elif family == "transient-burst":
        burst_at, burst = free(3, n), rng.randint(1, 4)
    elif family == "typo+root":
        roots.append(root("customer_id", "customers", rng.choice(vias[:2]), 3, n))
    if family in ("typo", "typo+root"):
        typo_at, typos = free(3, n), [rng.choice(TYPOS)]
    elif family == "repeated-typo":
        typo_at = rng.choice((1, 2, free(3, n)))
        typos = [rng.choice(TYPOS) for _ in range(rng.randint(2, 3))]
    elif family in FRAMEWORK_FAMILIES:
        typo_at, typos = free(4, n), [family]  # from 4: a file step can come before it

    fillers: dict[int, str] = {}
    for j in range(3, n + 1):
        if j not in used:
            fillers[j] = rng.choices(
                ("kv", "ref", "file", "email", "reserve", "note"), (5, 2, 2, 2, 1, 1)
            )[0]
    if reserve_at:
        fillers[reserve_at] = "reserve"
    kv_source = file_source = 0
    if family in FRAMEWORK_FAMILIES:
        fillers[typo_at] = FRAMEWORK_FAMILIES[family]
        if family == "path-escape":  # the fix reads a file an earlier step wrote
            files = [j for j in range(3, typo_at) if fillers.get(j) == "file"]
            file_source = files[-1] if files else max(j for j in fillers if j < typo_at)
            fillers[file_source] = "file"
    elif typo_at:
        kv_steps = [j for j in range(3, typo_at) if fillers.get(j) == "kv"]
        if typo_at <= 2 or not kv_steps:  # a missing key needs a kv.get of an earlier key
            typos = [t if t != "missing-key" else "missing-argument" for t in typos]
        if "missing-key" in typos:
            fillers[typo_at] = "read"
            kv_source = kv_steps[-1]
        elif typo_at > 2 and fillers.get(typo_at) in (None, "ref"):
            fillers[typo_at] = "note" if rng.random() < 0.5 else "kv"
    # a "ref" filler copies the latest earlier plain kv filler; without one it is a kv itself
    for j in sorted(fillers):
        if fillers[j] == "ref" and not any(
            fillers.get(k) == "kv" and k != typo_at for k in range(3, j)
        ):
            fillers[j] = "kv"
    return Generated(
        seed=seed,
        index=index,
        family=family,
        steps=n,
        fillers=fillers,
        roots=tuple(roots),
        burst_at=burst_at,
        burst=burst,
        typo_at=typo_at,
        typos=tuple(typos),
        reserve_at=reserve_at,
        undo_failures=undo_failures,
        kv_source=kv_source,
        file_source=file_source,
    )


def _gap(used: set[int], lo: int, hi: int) -> bool:
    return any(j not in used for j in range(lo + 1, hi))


# --------------------------------------------------------------------------- tools


def make_tools(scenario: Generated, ledger: Path) -> list[agenttx.Tool]:
    """Fresh tools for one run: the transient tool's failures and the undo's failures are
    counted per run; reservations go to an outside JSON-lines ledger."""
    burst_left = [scenario.burst]
    undo_failures_left = [scenario.undo_failures]

    def append(op: str, item: str) -> None:
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(json.dumps({"op": op, "item": item}) + "\n")

    @agenttx.tool(name="gen.find", effect="read", description="Look a name up in the directory.")
    async def find(table: str, name: str) -> dict[str, str]:
        found = DIRECTORY.get((table, name))
        if found is None:
            raise LookupError(f"no row with name={name} in table {table!r}")
        return {"id": found}

    @agenttx.tool(name="gen.rename", effect="read", description="Hand a value on under a key.")
    async def rename(value: str, as_key: str) -> dict[str, str]:
        return {as_key: value}

    @agenttx.tool(name="gen.note", effect="state", description="Keep a note in managed state.")
    async def note(
        ctx: agenttx.ToolContext, label: str, text: str, tag: str = ""
    ) -> dict[str, str]:
        await ctx.state.put(f"notes/{label}", {"text": text, "tag": tag})
        return {"label": label, "text": text, "tag": tag}

    @agenttx.tool(name="gen.flaky", effect="read", description="Fails a burst, then works.")
    async def flaky(operation: str, amount: int) -> dict[str, Any]:
        if burst_left[0] > 0:
            burst_left[0] -= 1
            raise ToolFailure(TRANSIENT_ERRORS[burst_left[0] % len(TRANSIENT_ERRORS)])
        return {"operation": operation, "done": True}

    @agenttx.tool(
        name="gen.reserve", effect="compensatable", description="Reserve an item outside."
    )
    async def reserve(ctx: agenttx.ToolContext, item: str) -> dict[str, str]:
        await ctx.register_undo({"item": item})  # durable before the outside call
        append("reserve", item)
        return {"reserved": item}

    @reserve.undo
    async def release(ctx: Any, item: str) -> None:
        if undo_failures_left[0] > 0:
            undo_failures_left[0] -= 1
            append("release-failed", item)
            raise ConnectionError(f"reservation service unavailable: cannot release {item}")
        append("release", item)

    prices = {"sku-7": 1200}
    remote = {"color": "red"}  # what the downstream server holds

    @agenttx.tool(name="gen.price", effect="read", description="A price from the tool's table.")
    async def price(sku: str) -> dict[str, Any]:
        return {"sku": sku, "price": prices[sku]}  # a bare KeyError on an unknown sku

    @agenttx.tool(name="gen.remote", effect="read", description="A downstream server's key.")
    async def remote_get(key: str) -> dict[str, Any]:
        if key not in remote:
            # the text the MCP server answers, raised as the gateway raises an isError reply
            raise DownstreamToolError(f"Error executing tool get: no such key: {key}")
        return {"key": key, "value": remote[key]}

    @agenttx.tool(name="gen.settle", effect="read", description="Settle an open period.")
    async def settle(period: str) -> dict[str, str]:
        if period != "2026-11":
            raise ValueError
        return {"settled": period}

    return [find, rename, note, flaky, reserve, price, remote_get, settle]


# --------------------------------------------------------------------------- running


@dataclass
class GeneratedRun:
    id: str
    family: str
    steps: int
    succeeded: bool
    tool_calls: int
    oracle_calls: int
    ratio: float
    bad_effects: int
    duplicate_effects: int
    leaked_effects: int
    orphaned_files: int
    wrong_reservations: int
    compensation_errors: int
    global_resets: int  # none is ever needed: every fault here has a cause a step can fix
    strategies: list[str]
    detail: dict[str, Any]
    wall_ms: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def run_generated(
    scenario: Generated, workdir: Path | None = None, policy: dict[str, Any] | None = None
) -> GeneratedRun:
    """One run through AgentTx on a fresh SQLite store; ``policy`` for the transaction (the
    default policy if None; ``{"max_step_retries": 0}`` makes the reference's decisions)."""
    with tempfile.TemporaryDirectory(prefix=f"agenttx-{scenario.id}-") as tmp:
        return await _run(scenario, workdir or Path(tmp), policy)


async def _run(scenario: Generated, workdir: Path, policy: dict[str, Any] | None) -> GeneratedRun:
    workdir.mkdir(parents=True, exist_ok=True)
    sandbox, outbox, ledger = workdir / "files", workdir / "outbox.jsonl", workdir / "ledger.jsonl"
    started = time.perf_counter()
    engine = await agenttx.Engine.open(
        f"sqlite:///{workdir / 'agenttx.db'}",
        fs_root=sandbox,
        outbox_path=outbox,
        tools=make_tools(scenario, ledger),
        tx_idle_timeout_s=0,
        background=False,
    )
    agent, calls, strategies, comp_errors = Agent(), 0, [], 0
    succeeded = False
    try:
        tx = (await engine.begin(agent_id="generated-agent", policy=policy)).transaction_id
        nxt = 1
        while True:
            if nxt > scenario.steps:
                succeeded = (await engine.commit(tx)).committed
                break
            if calls >= MAX_CALLS:
                raise RuntimeError(f"{scenario.id}: no end after {calls} calls")
            tool, args = scenario.plan(nxt, agent)
            calls += 1
            result = await engine.execute_step(tx, nxt, tool, args)
            if nxt == scenario.typo_at and agent.typos_made < len(scenario.typos):
                agent.typos_made += 1  # the agent makes its next mistake, or none
            if result.status is agenttx.StepStatus.SUCCESS:
                agent.outputs[nxt] = result.output
                nxt = result.next_step_id
                continue
            comp_errors += len(result.compensation_errors)
            strategies.append(f"{result.strategy.value}@{nxt}→{result.next_step_id}")
            for root in scenario.roots:
                if root.key in result.clean_hint:
                    agent.learned.add(root.key)
            if result.status is not agenttx.StepStatus.ROLLBACK_TRIGGERED:
                break  # aborted
            nxt = result.next_step_id
            agent.outputs = {k: v for k, v in agent.outputs.items() if k < nxt}
    finally:
        await engine.close()

    emails = [e["idempotency_key"] for e in read_jsonl(outbox)]
    duplicate = len(emails) - len(set(emails))
    leaked = 0 if succeeded else len(emails)
    expected_files = scenario.expected_files() if succeeded else set()
    orphans = [f for f in list_files(sandbox) if f not in expected_files]
    net: Counter[str] = Counter()
    ledger_entries = read_jsonl(ledger)
    for entry in ledger_entries:
        if entry["op"] != "release-failed":
            net[entry["item"]] += 1 if entry["op"] == "reserve" else -1
    expected_net = scenario.expected_reservations() if succeeded else Counter()
    wrong = sum(abs(net[item] - expected_net[item]) for item in set(net) | set(expected_net))
    missing_emails = len(scenario.expected_emails() - set(emails)) if succeeded else 0
    bad = duplicate + leaked + len(orphans) + wrong + missing_emails
    oracle = scenario.oracle_calls()
    return GeneratedRun(
        id=scenario.id,
        family=scenario.family,
        steps=scenario.steps,
        succeeded=succeeded,
        tool_calls=calls,
        oracle_calls=oracle,
        ratio=round(calls / oracle, 4),
        bad_effects=bad,
        duplicate_effects=duplicate,
        leaked_effects=leaked,
        orphaned_files=len(orphans),
        wrong_reservations=wrong,
        compensation_errors=comp_errors,
        global_resets=sum(1 for s in strategies if s.startswith("GLOBAL_RESET")),
        strategies=strategies,
        detail={
            "roots": [asdict(r) for r in scenario.roots],
            "burst": [scenario.burst_at, scenario.burst] if scenario.burst else [],
            "typo": [scenario.typo_at, *scenario.typos] if scenario.typo_at else [],
            "reserve_at": scenario.reserve_at,
            "failed_compensations": sum(1 for e in ledger_entries if e["op"] == "release-failed"),
            "orphans": orphans,
            "missing_emails": missing_emails,
        },
        wall_ms=round((time.perf_counter() - started) * 1000, 1),
    )


def summarize(runs: list[GeneratedRun]) -> dict[str, Any]:
    """Mean and worst ratio to the oracle, bad effects and outcomes, overall and per family."""

    def stats(group: list[GeneratedRun]) -> dict[str, Any]:
        ratios = [r.ratio for r in group]
        return {
            "scenarios": len(group),
            "mean_ratio": round(sum(ratios) / len(ratios), 4) if ratios else math.nan,
            "worst_ratio": max(ratios, default=math.nan),
            "at_oracle": sum(1 for r in group if r.tool_calls == r.oracle_calls),
            "bad_effects": sum(r.bad_effects for r in group),
            "global_resets": sum(r.global_resets for r in group),
            "failed_runs": sum(1 for r in group if not r.succeeded),
            "tool_calls": sum(r.tool_calls for r in group),
            "oracle_calls": sum(r.oracle_calls for r in group),
        }

    worst = max(runs, key=lambda r: r.ratio) if runs else None
    return {
        **stats(runs),
        "worst_scenario": worst.id if worst else "",
        "families": {f: stats([r for r in runs if r.family == f]) for f in FAMILIES},
    }
