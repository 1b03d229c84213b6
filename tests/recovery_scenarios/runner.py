"""The two runs of one scenario: the naive baseline and AgentTx, with the same scripted agent.

Both runs use the real built-in tools (``BUILTIN_TOOLS``) and a fresh set of bench tools, on a
fresh SQLite store and sandbox, so a run sees nothing of another.

**Baseline** (no transaction layer, the reference's "naive agent loop"). Every tool call is its
own AgentTx transaction of one step that is always committed, so whatever the call wrote is
published at once, even when the tool failed. The tools run behind an *auto-commit* wrapper:

- the wrapper calls the real tool with a context whose ``register_undo`` drops the undo record
  (nothing can ever be compensated: ``fs.write`` files stay on disk) and whose
  ``stage_effect`` sends the effect at once to a plain JSON-lines file with no de-duplication
  (``sent.jsonl``), whether or not the call then fails;
- a tool's exception is caught and returned as the step's output, so the engine treats the call
  as done and commits its state writes: a failed call's writes are kept, as auto-commit does;
- the agent gets the tool's raw error text (``str(exc)``, exactly what the tool service
  returned) and keeps its own ``${steps.N…}`` outputs, resolved with ``agenttx.core.refs``.

The agent loop: retry a failing step up to 3 times with the raw error in context, then restart
from step 1 (outputs cleared, the store and sandbox keep everything) up to 3 times, then give
up; a duplicate-key error ("already exists") on a replayed step is taken as "already done".

**AgentTx**: one transaction (``begin("bench-agent")``, default policy, idle reaper off); the
agent sends the step the engine asks for next and sees only the Clean Hint of a failure;
``commit`` once every step has succeeded. Effects count only if dispatched at commit, read from
the engine's JSON-lines outbox.
"""

from __future__ import annotations

import inspect
import json
import math
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import agenttx
from agenttx.core.refs import UnresolvedReference, resolve
from agenttx.tools.builtin import BUILTIN_TOOLS
from agenttx.tools.builtin.fs import TMP_SUFFIX

from .scenario import Kind, Scenario
from .tools import make_bench_tools

BASELINE_MAX_RETRIES = 3
BASELINE_MAX_RESTARTS = 3
MAX_AGENTTX_CALLS = 100_000  # a safety stop: the engine's bound is far below this
MAX_EVENTS = 48


@dataclass
class RunMetrics:
    succeeded: bool
    outcome: str
    tool_calls: int
    failed_calls: int
    feedback_bytes: int
    feedback_tokens: int  # ceil(bytes / 4)
    effects_dispatched: int
    duplicate_effects: int  # dispatched - distinct idempotency keys
    leaked_effects: int  # dispatched by a run that did not succeed
    orphaned_files: int  # files the final state should not contain
    bad_effects: int  # duplicate + leaked + orphaned
    actions: dict[str, int]
    events: list[str]
    orphans: list[str] = field(default_factory=list)
    strategies: list[dict[str, Any]] = field(default_factory=list)
    wall_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Tally:
    calls: int = 0
    failed: int = 0
    feedback_bytes: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    events: list[str] = field(default_factory=list)

    def event(self, action: str, text: str) -> None:
        self.actions[action] += 1
        if len(self.events) < MAX_EVENTS:
            self.events.append(text)
        elif len(self.events) == MAX_EVENTS:
            self.events.append("…")

    def feedback(self, text: str) -> None:
        self.failed += 1
        self.feedback_bytes += len(text.encode())


def list_files(root: Path) -> list[str]:
    """Every file under ``root`` (relative, ``/``-separated), ignoring interrupted temp files."""
    if not root.exists():
        return []
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not p.name.endswith(TMP_SUFFIX)
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _finish(
    tally: _Tally,
    succeeded: bool,
    outcome: str,
    effects: list[dict[str, Any]],
    sandbox: Path,
    scenario: Scenario,
    started: float,
    strategies: list[dict[str, Any]] | None = None,
) -> RunMetrics:
    dispatched = len(effects)
    duplicate = dispatched - len({e["idempotency_key"] for e in effects})
    leaked = 0 if succeeded else dispatched
    expected = scenario.expected_files() if succeeded else set()
    orphans = [f for f in list_files(sandbox) if f not in expected]
    return RunMetrics(
        succeeded=succeeded,
        outcome=outcome,
        tool_calls=tally.calls,
        failed_calls=tally.failed,
        feedback_bytes=tally.feedback_bytes,
        feedback_tokens=math.ceil(tally.feedback_bytes / 4),
        effects_dispatched=dispatched,
        duplicate_effects=duplicate,
        leaked_effects=leaked,
        orphaned_files=len(orphans),
        bad_effects=duplicate + leaked + len(orphans),
        actions=dict(sorted(tally.actions.items())),
        events=tally.events,
        orphans=orphans,
        strategies=strategies or [],
        wall_ms=(time.perf_counter() - started) * 1000,
    )


# --------------------------------------------------------------------------- baseline


class _NaiveOutbox:
    """Sends an effect the moment it is staged: one JSON line each, no de-duplication."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, step_id: int, channel: str, payload: Any, key: str) -> None:
        line = json.dumps(
            {"step_id": step_id, "channel": channel, "payload": payload, "idempotency_key": key},
            separators=(",", ":"),
        )
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


class _AutoCommitContext:
    """What a tool sees in the baseline: the engine's state view (published at the end of the
    call), no undo (records are dropped) and effects sent immediately."""

    def __init__(self, ctx: agenttx.ToolContext, outbox: _NaiveOutbox, step_id: int) -> None:
        self._ctx = ctx
        self._outbox = outbox
        self._sent = 0
        self.state = ctx.state
        self.step_id = step_id  # the agent's step, not the one-step transaction's
        self.transaction_id = ctx.transaction_id
        self.idempotency_key = ctx.idempotency_key
        self.fs_root = ctx.fs_root

    async def register_undo(self, args: dict[str, Any], *, handler: str | None = None) -> None:
        return None  # auto-commit: there is nothing to roll back to

    def stage_effect(
        self, channel: str, payload: Any = None, idempotency_key: str | None = None
    ) -> str:
        self._sent += 1
        key = idempotency_key or f"{self.idempotency_key}:effect:{self._sent}"
        self._outbox.send(self.step_id, channel, payload, key)
        return key


async def _invoke(tool: agenttx.Tool, ctx: Any, arguments: Any) -> Any:
    """Call a tool's function the way the engine does (validated keyword arguments for a typed
    tool, the raw argument object for a ``schema=`` tool)."""
    if tool.input_model is not None:
        kwargs = tool.validate(arguments if isinstance(arguments, Mapping) else {})
        result = tool.fn(ctx, **kwargs) if tool.takes_context else tool.fn(**kwargs)
    else:
        result = tool.fn(ctx, arguments) if tool.takes_context else tool.fn(arguments)
    if inspect.isawaitable(result):
        result = await result
    return result


def _auto_commit_tool(inner: agenttx.Tool, outbox: _NaiveOutbox, step: list[int]) -> agenttx.Tool:
    @agenttx.tool(name=f"autocommit/{inner.name}", effect="state", schema={"type": "object"})
    async def call(ctx: agenttx.ToolContext, arguments: Any) -> dict[str, Any]:
        proxy = _AutoCommitContext(ctx, outbox, step[0])
        try:
            return {"ok": await _invoke(inner, proxy, arguments)}
        except Exception as exc:  # ArgumentError included: the raw text goes back
            return {"error": str(exc)}

    return call


async def run_baseline(scenario: Scenario, workdir: Path) -> RunMetrics:
    workdir.mkdir(parents=True, exist_ok=True)
    sandbox = workdir / "files"
    outbox = _NaiveOutbox(workdir / "sent.jsonl")
    current_step = [0]
    inner = {t.name: t for t in (*BUILTIN_TOOLS, *make_bench_tools())}
    wrapped = [_auto_commit_tool(t, outbox, current_step) for t in inner.values()]
    engine = await agenttx.Engine.open(
        f"sqlite:///{workdir / 'agenttx.db'}",
        fs_root=sandbox,
        outbox_path=workdir / "engine-outbox.jsonl",
        tools=wrapped,
        tx_idle_timeout_s=0,
        background=False,
    )
    tally = _Tally()
    started = time.perf_counter()

    async def call(step: int, tool: str, args: dict[str, Any], outputs: dict[int, Any]) -> Any:
        """One auto-committed call: (True, output) or (False, raw error text)."""
        try:
            resolved, _ = resolve(args, outputs, step)
        except UnresolvedReference as exc:
            return False, exc.message
        current_step[0] = step
        begun = await engine.begin(agent_id="baseline")
        result = await engine.execute_step(begun.transaction_id, 1, f"autocommit/{tool}", resolved)
        if result.status is not agenttx.StepStatus.SUCCESS:
            raise RuntimeError(f"the auto-commit wrapper failed: {result.clean_hint}")
        await engine.commit(begun.transaction_id)  # even when the tool failed
        out = result.output
        return ("error" not in out), out.get("ok", out.get("error"))

    async def one_pass(learned: list[bool], restarts: list[int]) -> str:
        outputs: dict[int, Any] = {}
        for step in range(1, scenario.steps + 1):
            retries = 0
            while True:
                tool, args = scenario.plan(step, learned[0])
                tally.calls += 1
                ok, value = await call(step, tool, args, outputs)
                if ok:
                    outputs[step] = value
                    break
                error = str(value)
                tally.feedback(error)
                learned[0] = learned[0] or "customer_id" in error
                if "already exists" in error:
                    tally.event(
                        "skip_duplicate", f"step {step}: duplicate on replay, taken as done"
                    )
                    outputs[step] = args
                    break
                retries += 1
                if retries > BASELINE_MAX_RETRIES:
                    restarts[0] += 1
                    if restarts[0] > BASELINE_MAX_RESTARTS:
                        tally.event("give_up", f"step {step}: gave up after 3 restarts")
                        return "gave up"
                    tally.event("restart", f"step {step}: restart from step 1")
                    return "restart"
                tally.event("retry", f"step {step}: retry with the raw error in context")
        return "completed"

    try:
        learned, restarts = [False], [0]
        outcome = "restart"
        while outcome == "restart":
            outcome = await one_pass(learned, restarts)
    finally:
        await engine.close()
    effects = read_jsonl(workdir / "sent.jsonl")
    succeeded = outcome == "completed"
    return _finish(tally, succeeded, outcome, effects, sandbox, scenario, started)


# --------------------------------------------------------------------------- AgentTx


async def run_agenttx(scenario: Scenario, workdir: Path) -> RunMetrics:
    workdir.mkdir(parents=True, exist_ok=True)
    sandbox = workdir / "files"
    outbox_path = workdir / "outbox.jsonl"
    engine = await agenttx.Engine.open(
        f"sqlite:///{workdir / 'agenttx.db'}",
        fs_root=sandbox,
        outbox_path=outbox_path,
        tools=make_bench_tools(),
        tx_idle_timeout_s=0,
        # No background dispatcher: commit delivers the effects itself (a failed delivery
        # would show up below as a dispatched count that differs from the outbox file).
        background=False,
    )
    tally = _Tally()
    committed: agenttx.CommitResult | None = None
    strategies: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        begun = await engine.begin(agent_id="bench-agent")
        tx = begun.transaction_id
        learned = False
        nxt = begun.next_step_id
        while True:
            if nxt > scenario.steps:
                committed = await engine.commit(tx)
                succeeded, outcome = True, "committed"
                break
            if tally.calls >= MAX_AGENTTX_CALLS:
                raise RuntimeError(f"{scenario.id}: no end after {tally.calls} calls")
            tool, args = scenario.plan(nxt, learned)
            tally.calls += 1
            result = await engine.execute_step(tx, nxt, tool, args)
            if result.status is agenttx.StepStatus.SUCCESS:
                nxt = result.next_step_id
                continue
            tally.feedback(result.clean_hint)
            learned = learned or "customer_id" in result.clean_hint
            strategy = result.strategy.value
            strategies.append(
                {
                    "step": nxt,
                    "strategy": strategy,
                    "rollback_to_step": result.rollback_to_step,
                    "next_step_id": result.next_step_id,
                    "category": result.error_category,
                    "hint": result.clean_hint,
                }
            )
            if result.status is agenttx.StepStatus.FAILED:
                tally.event(strategy.lower(), f"step {nxt}: abort, everything compensated")
                succeeded, outcome = False, "aborted"
                break
            if result.status is not agenttx.StepStatus.ROLLBACK_TRIGGERED:
                raise RuntimeError(f"{scenario.id}: unexpected step status {result.status}")
            tally.event(
                strategy.lower(), f"step {nxt}: {strategy} → resume at {result.next_step_id}"
            )
            nxt = result.next_step_id
        queued = await engine.store.list_outbox(tx_id=tx)
    finally:
        await engine.close()
    effects = read_jsonl(outbox_path)
    if committed is not None and committed.effects_dispatched != len(effects):
        raise RuntimeError(
            f"{scenario.id}: commit reports {committed.effects_dispatched} dispatched, "
            f"the outbox file has {len(effects)}"
        )
    # The JSON-lines channel skips keys it has already written: count the commit's outbox rows
    # too, so an effect the engine enqueued twice would still show up as a duplicate.
    if len(queued) > len(effects):
        effects = [{"idempotency_key": row.idempotency_key} for row in queued]
    return _finish(tally, succeeded, outcome, effects, sandbox, scenario, started, strategies)


async def run_scenario(scenario: Scenario, workdir: Path | None = None) -> dict[str, Any]:
    """Both runs of ``scenario``, each in its own directory (a temporary one by default)."""
    with tempfile.TemporaryDirectory(prefix=f"agenttx-recovery-{scenario.id}-") as tmp:
        base = workdir or Path(tmp)
        baseline = await run_baseline(scenario, base / "baseline")
        agenttx_run = await run_agenttx(scenario, base / "agenttx")
    return {
        "id": scenario.id,
        "kind": scenario.kind.value,
        "steps": scenario.steps,
        "root_step": scenario.root if scenario.kind is Kind.ROOT_CAUSE else None,
        "failing_step": scenario.fail_at,
        "baseline": baseline.to_dict(),
        "agenttx": agenttx_run.to_dict(),
    }
