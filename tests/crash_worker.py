"""The worker process of the crash harness (``tests/e2e/test_crash.py``), and the pieces the
harness shares with it: the acknowledgement log, the model it replays into, the outside ledger
tool, the workload and the reconciler.

Run as ``python tests/crash_worker.py <dir> <seed> [--run N] [--agents K] [--txs N]``. It opens
the engine on ``<dir>/agenttx.db``, prints ``opening`` before ``Engine.open`` (which runs crash
recovery) and ``ready`` once it has reconciled its log with the store, then runs a dense
randomized workload (no sleeps) until it is killed, or for ``--txs`` transactions per agent.

Files in ``<dir>``:

- ``acks.jsonl``: the intent/acknowledgement log, one JSON object a line, appended with
  ``write`` + ``fsync``. Before every engine call an ``intent`` line (what is about to be asked);
  after the call returns an ``ack`` line (what the engine answered). A call killed in between
  has an intent and no ack; the next reconciler (the next worker, or the checker) looks at the
  store, decides which outcome the call had, checks that outcome is one the call may have, and
  writes a ``settle`` line with the store's view of the transaction. ``checked`` marks a
  finished reconciliation, ``violation`` an invariant that did not hold.
- ``phase``: what the worker last started (``step:ledger.add``, ``commit``, ``deliver`` …),
  overwritten in place before each call; best effort, not fsynced.
- ``ledger.jsonl``: the outside system of the ``ledger.add`` tool: ``entry`` lines and
  ``reversal`` lines, each naming a unique entry id; ``undo_calls.jsonl`` records every call of
  the ledger's undo handler (a re-run after a crash is legal; a second reversal is not).
- ``outbox.jsonl``: the JSON-lines effect channel; ``deliveries.jsonl``: every delivery
  attempt made to it (a repeat after a crash is legal); ``files/``: the ``fs.*`` sandbox.

Every name a transaction writes (kv keys, record ids, file paths, ledger entries, effect keys)
starts with the transaction's tag and carries a process-unique suffix, so any value found later
names the transaction, and the attempt, that produced it. The only shared names are the keys
``shared/<n>``, whose values carry the tag; they make concurrent transactions conflict.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import random
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import agenttx
from agenttx import StepStatus, TxStatus

ACKS = "acks.jsonl"
PHASE = "phase"
LEDGER = "ledger.jsonl"
UNDO_CALLS = "undo_calls.jsonl"
OUTBOX = "outbox.jsonl"
DELIVERIES = "deliveries.jsonl"
DB = "agenttx.db"
FILES = "files"
TENANT = "default"
SHARED_KEYS = 2
LEASE_SECS = 0.2  # the dispatcher's delivery lease: short, so a dead worker's claims expire soon
MAX_POOL = 4  # open transactions a worker keeps around to resume later

ACTIVE = TxStatus.ACTIVE.value
COMMITTED = TxStatus.COMMITTED.value
ABORTED = frozenset({TxStatus.ROLLED_BACK.value, TxStatus.FAILED.value})


# ---------------------------------------------------------------------------- small files


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line with a single ``write`` and ``fsync`` it (a kill leaves the line
    whole or absent)."""
    data = (json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if isinstance(record, dict):
                out.append(record)
    return out


class PhaseFile:
    """What the worker last started, overwritten in place (one ``pwrite``, no fsync)."""

    WIDTH = 48

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def set(self, phase: str) -> None:
        os.pwrite(self._fd, phase[: self.WIDTH].ljust(self.WIDTH).encode(), 0)

    @staticmethod
    def read(path: Path) -> str:
        try:
            return path.read_text().strip() or "?"
        except FileNotFoundError:
            return "not-started"


class AckLog:
    """The intent/acknowledgement log of one actor (a worker run ``r<n>`` or a checker round
    ``c<n>``). Op ids and name suffixes are unique per actor."""

    def __init__(self, path: Path, actor: str) -> None:
        self.path = path
        self.actor = actor
        self._ops = 0
        self._uids = 0
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def new_id(self) -> str:
        self._ops += 1
        return f"{self.actor}.{self._ops}"

    def uid(self) -> str:
        self._uids += 1
        return f"{self.actor}n{self._uids}"

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"actor": self.actor, **record}, separators=(",", ":"))
        os.write(self._fd, (line + "\n").encode())
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


# ---------------------------------------------------------------------------- the ledger tool


def ledger_entries(path: Path) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """(entry id → its entry lines, entry id → number of reversal lines)."""
    entries: dict[str, list[dict[str, Any]]] = {}
    reversals: dict[str, int] = {}
    for rec in read_jsonl(path):
        if rec.get("kind") == "entry":
            entries.setdefault(rec["entry"], []).append(rec)
        elif rec.get("kind") == "reversal":
            reversals[rec["entry"]] = reversals.get(rec["entry"], 0) + 1
    return entries, reversals


def _append_reversal(path: Path, entry: str, tx_id: str) -> None:
    found = False
    for rec in read_jsonl(path):
        if rec.get("entry") != entry:
            continue
        if rec.get("kind") == "reversal":
            return  # already reversed: the undo is idempotent by entry id
        found = True
    if not found:
        # Registered before the call, so a crash between the two leaves an undo for an entry
        # that was never written: there is nothing to reverse.
        return
    append_line(path, {"kind": "reversal", "entry": entry, "tx": tx_id})


@agenttx.tool(
    name="ledger.add",
    effect="compensatable",
    description="Append an entry to the external ledger (not idempotent); undo appends a reversal.",
)
async def ledger_add(
    ctx: agenttx.ToolContext, entry: str, amount: int, reject: bool = False
) -> dict[str, Any]:
    ledger = ctx.fs_root.parent / LEDGER
    # The undo is durable before the outside call, as the tool contract asks.
    await ctx.register_undo({"entry": entry, "ledger": str(ledger)})
    append_line(
        ledger,
        {
            "kind": "entry",
            "entry": entry,
            "tx": ctx.transaction_id,
            "step": ctx.step_id,
            "amount": amount,
            "attempt_key": ctx.idempotency_key,
        },
    )
    if reject:  # a partial failure: the entry is written, then the call fails
        raise RuntimeError(f"ledger rejected entry {entry} after writing it")
    return {"entry": entry, "amount": amount}


@ledger_add.undo
async def ledger_undo(ctx: Any, entry: str, ledger: str) -> None:
    path = Path(ledger)
    append_line(
        path.with_name(UNDO_CALLS),
        {"entry": entry, "tx": ctx.transaction_id, "undo_key": ctx.idempotency_key},
    )
    _append_reversal(path, entry, ctx.transaction_id)


@agenttx.tool(name="note.put", effect="state", description="A plain (threaded) user tool.")
def note_put(ctx: agenttx.SyncToolContext, key: str, text: str) -> dict[str, Any]:
    before = ctx.state.get(f"notes/{key}")
    ctx.state.put(f"notes/{key}", {"tag": tag_of(key), "text": text})
    return {"key": key, "replaced": before is not None}


async def open_engine(d: Path, **kwargs: Any) -> agenttx.Engine:
    """The engine as the worker and the checker open it."""
    kwargs.setdefault("tx_idle_timeout_s", 0)  # no reaper: the harness ends transactions
    return await agenttx.Engine.open(
        f"sqlite:///{d / DB}",
        fs_root=d / FILES,
        outbox_path=d / OUTBOX,
        tools=[ledger_add, note_put],
        dispatch_lease_s=LEASE_SECS,
        dispatch_backoff_s=0.05,
        **kwargs,
    )


# ---------------------------------------------------------------------------- the model


def tag_of(name: str) -> str:
    """The transaction tag a written name starts with (``T3x1x7/...`` or ``T3x1x7.…``)."""
    return name.split("/", 1)[0].split(".", 1)[0]


def state_key(tool: str, args: dict[str, Any]) -> str | None:
    if tool in ("kv.put", "kv.delete"):
        return f"kv/{args['key']}"
    if tool == "record.insert":
        return f"records/{args['table']}/{args['id']}"
    if tool == "note.put":
        return f"notes/{args['key']}"
    return None


def is_shared(key: str) -> bool:
    return key.startswith("kv/shared/")


@dataclass
class TxModel:
    """What the agent was told about one transaction: status, next step, the live steps (with
    the arguments they ran with) and a pending OUTCOME_UNKNOWN step."""

    tx: str
    tag: str
    status: str = ACTIVE
    next: int = 1
    unknown: int = 0
    unknown_args: Any = None
    live: dict[int, tuple[str, Any]] = field(default_factory=dict)
    keys_ever: set[str] = field(default_factory=set)  # every state key any attempt wrote
    dirty: bool = True  # touched since the last reconciliation
    lost: bool = False  # an unexpected error left the call unacknowledged (in this process)

    def _ordered(self) -> list[tuple[str, Any]]:
        return [self.live[s] for s in sorted(self.live)]

    def writes(self) -> dict[str, Any]:
        """Managed state this transaction publishes if it commits now (None = deleted)."""
        out: dict[str, Any] = {}
        for tool, args in self._ordered():
            key = state_key(tool, args)
            if key is None:
                continue
            if tool == "kv.put":
                out[key] = args.get("value")
            elif tool == "kv.delete":
                if out.get(key) is not None:
                    out[key] = None
            elif tool == "record.insert":
                out[key] = {**args.get("fields", {}), "id": args["id"]}
            elif tool == "note.put":
                out[key] = {"tag": tag_of(args["key"]), "text": args["text"]}
        return out

    def files(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for tool, args in self._ordered():
            if tool == "fs.write":
                out[args["path"]] = args["contents"]
        return out

    def effects(self) -> dict[str, tuple[str, Any]]:
        return {
            args["idempotency_key"]: (args["channel"], args.get("payload"))
            for tool, args in self._ordered()
            if tool == "effect.stage"
        }

    def entries(self) -> dict[str, int]:
        return {
            args["entry"]: args["amount"] for tool, args in self._ordered() if tool == "ledger.add"
        }

    def writes_shared(self) -> bool:
        return any(is_shared(k) for k in self.writes())

    def snapshot(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "next": self.next,
            "unknown": self.unknown,
            "unknown_args": self.unknown_args,
            "live": [[s, t, a] for s, (t, a) in sorted(self.live.items())],
            "requires_human": False,
        }

    def load(self, snap: dict[str, Any]) -> None:
        self.status = snap["status"]
        self.next = snap["next"]
        self.unknown = snap["unknown"]
        self.unknown_args = snap["unknown_args"]
        self.live = {int(s): (t, a) for s, t, a in snap["live"]}


def apply_result(m: TxModel, intent: dict[str, Any], r: dict[str, Any]) -> None:
    """Apply what an engine call answered (an ack, or a candidate outcome) to the model."""
    op = intent["op"]
    if op == "step":
        k = intent["step"]
        if r["step_status"] == StepStatus.SUCCESS.value:
            m.live[k] = (intent["tool"], intent["args"])
        elif r["step_status"] == StepStatus.OUTCOME_UNKNOWN.value:
            m.unknown, m.unknown_args = k, intent["args"]
    elif op == "resolve":
        if intent["happened"]:
            m.live[intent["step"]] = ("ledger.add", m.unknown_args)
        m.unknown, m.unknown_args = 0, None
    elif op == "rewind":
        t = intent["to"]
        if t <= 1 or m.unknown >= t:  # the engine's rule: the rewind undid the unknown step
            m.unknown, m.unknown_args = 0, None
    m.status = r["status"]
    m.next = r["next"]
    if m.status == ACTIVE:
        m.live = {s: v for s, v in m.live.items() if s < m.next}
    else:
        m.unknown, m.unknown_args = 0, None
    m.dirty = True


def diff(model: dict[str, Any], db: dict[str, Any]) -> list[str]:
    """Differences between a model snapshot and the store's, as far as they matter."""
    if model["status"] != db["status"]:
        return [f"status {model['status']} != store {db['status']}"]
    out: list[str] = []
    if db["requires_human"]:
        out.append("requires_human is set")
    if model["status"] == ACTIVE:
        for name in ("next", "unknown", "unknown_args"):
            if model[name] != db[name]:
                out.append(f"{name} {model[name]!r} != store {db[name]!r}")
    if model["status"] in (ACTIVE, COMMITTED) and model["live"] != db["live"]:
        out.append(f"live steps {model['live']} != store {db['live']}")
    return out


@dataclass
class Replay:
    """The log read back: one model per transaction, and the calls still without an answer."""

    models: dict[str, TxModel] = field(default_factory=dict)
    by_tag: dict[str, TxModel] = field(default_factory=dict)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # op id → intent
    violations: list[dict[str, Any]] = field(default_factory=list)
    settles: list[dict[str, Any]] = field(default_factory=list)

    def add(self, tx: str, tag: str) -> TxModel:
        m = TxModel(tx, tag)
        self.models[tx] = m
        self.by_tag[tag] = m
        return m

    def on_intent(self, rec: dict[str, Any]) -> None:
        self.pending[rec["id"]] = rec
        m = self.models.get(rec.get("tx") or "")
        if m is not None:
            m.dirty = True
            if rec["op"] == "step":
                key = state_key(rec["tool"], rec["args"])
                if key is not None:
                    m.keys_ever.add(key)

    def on_ack(self, rec: dict[str, Any]) -> None:
        intent = self.pending.pop(rec["id"])
        if intent["op"] == "begin":
            self.add(rec["tx"], intent["tag"])
            return
        apply_result(self.models[intent["tx"]], intent, rec)

    def on_settle(self, rec: dict[str, Any]) -> None:
        intent = self.pending.pop(rec["id"])
        self.settles.append({**rec, "intent": intent})
        if intent["op"] == "begin":
            if rec["outcome"] == "begun":
                self.add(rec["tx"], intent["tag"])
            return
        m = self.models[intent["tx"]]
        m.load(rec["db"])
        m.dirty = True

    def on_record(self, rec: dict[str, Any]) -> None:
        ev = rec.get("ev")
        if ev == "intent":
            self.on_intent(rec)
        elif ev == "ack":
            self.on_ack(rec)
        elif ev == "settle":
            self.on_settle(rec)
        elif ev == "resync":
            self.models[rec["tx"]].load(rec["db"])
        elif ev == "checked":
            for m in self.models.values():
                m.dirty = False
        elif ev == "violation":
            self.violations.append(rec)


def replay(path: Path) -> Replay:
    st = Replay()
    for rec in read_jsonl(path):
        st.on_record(rec)
    return st


# ---------------------------------------------------------------------------- reconciliation


async def db_snapshot(engine: agenttx.Engine, tx: str) -> dict[str, Any]:
    """The store's view of a transaction, in the model's snapshot format."""
    info = await engine.get_transaction(tx, history=False)
    live = [
        [s.step_id, s.tool_name, s.arguments]
        for s in info.steps
        if s.live and s.status == StepStatus.SUCCESS.value
    ]
    unknown_args = None
    if info.outcome_unknown_step:
        full = await engine.get_transaction(tx, history=True)
        found = [
            s
            for s in full.steps
            if s.step_id == info.outcome_unknown_step
            and s.status == StepStatus.OUTCOME_UNKNOWN.value
        ]
        unknown_args = found[-1].arguments if found else "<no OUTCOME_UNKNOWN step row>"
    return {
        "status": info.status.value,
        "next": info.next_step_id if info.status is TxStatus.ACTIVE else 0,
        "unknown": info.outcome_unknown_step,
        "unknown_args": unknown_args,
        "live": sorted(live, key=lambda x: x[0]),
        "requires_human": info.requires_human,
    }


def candidates(
    m: TxModel, intent: dict[str, Any], db: dict[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """Every store state an interrupted call may legally have left: (outcome, snapshot)."""
    k = m.next
    results: list[tuple[str, dict[str, Any]]] = [("not_applied", {})]
    op = intent["op"]
    if op == "step":
        results.append(("applied", {"step_status": "SUCCESS", "status": ACTIVE, "next": k + 1}))
        if intent["tool"] == "ledger.add":  # outside and not idempotent
            unknown = {"step_status": "OUTCOME_UNKNOWN", "status": ACTIVE, "next": k}
            results.append(("outcome_unknown", unknown))
        if intent["may_fail"]:
            if db["status"] == ACTIVE and 1 <= db["next"] < k:
                rewound = {
                    "step_status": "ROLLBACK_TRIGGERED",
                    "status": ACTIVE,
                    "next": db["next"],
                }
                results.append(("failed_rewound", rewound))
            results.append(
                ("failed_aborted", {"step_status": "FAILED", "status": "FAILED", "next": 0})
            )
    elif op == "rewind":
        results.append(("applied", {"status": ACTIVE, "next": intent["to"]}))
    elif op == "abort":
        results.append(("applied", {"status": TxStatus.ROLLED_BACK.value, "next": 0}))
    elif op == "commit":
        results.append(("committed", {"status": COMMITTED, "next": 0}))
        if m.writes_shared():
            results.append(("conflict", {"status": TxStatus.FAILED.value, "next": 0}))
    elif op == "resolve":
        nxt = k + 1 if intent["happened"] else k
        results.append(("applied", {"status": ACTIVE, "next": nxt}))
    out: list[tuple[str, dict[str, Any]]] = []
    for label, result in results:
        c = copy.deepcopy(m)
        if result:
            apply_result(c, intent, result)
        out.append((label, c.snapshot()))
    return out


async def list_all(engine: agenttx.Engine, statuses: list[str]) -> list[agenttx.TransactionInfo]:
    out: list[agenttx.TransactionInfo] = []
    after = ""
    while True:
        page = await engine.list_transactions(statuses=statuses, limit=500, after_id=after)
        if not page:
            return out
        out.extend(page)
        after = page[-1].transaction_id


def describe(intent: dict[str, Any]) -> str:
    op = intent["op"]
    if op == "step":
        return f"step {intent['step']} {intent['tool']} {json.dumps(intent['args'])}"
    if op == "rewind":
        return f"rewind to {intent['to']}"
    return str(op)


async def reconcile(engine: agenttx.Engine, st: Replay, log: AckLog, *, full: bool) -> int:
    """After a restart: settle every call the log has no answer for against the store, and
    compare the store with every model touched since the last reconciliation (all if ``full``).
    Returns the number of violations written to the log."""
    found = 0
    ledger = Path(engine.config.fs_root).parent / LEDGER

    def bad(text: str) -> None:
        nonlocal found
        found += 1
        rec = {"ev": "violation", "text": text}
        log.write(rec)
        st.violations.append({"actor": log.actor, **rec})

    for t in await list_all(engine, ["EXECUTING", "ROLLING_BACK", "COMMITTING"]):
        bad(f"{t.transaction_id} is stuck in {t.status.value} after recovery")

    begins = {i["tag"]: i for i in st.pending.values() if i["op"] == "begin"}
    for t in await list_all(engine, [ACTIVE]):
        if t.transaction_id in st.models:
            continue
        tag = t.metadata.get("tag", "")
        intent = begins.pop(tag, None)
        if intent is None:
            bad(f"open transaction {t.transaction_id} (tag {tag!r}) that nobody began")
            continue
        rec = {"ev": "settle", "id": intent["id"], "op": "begin", "tx": t.transaction_id}
        rec["outcome"] = "begun"
        log.write(rec)
        st.on_settle(rec)
    for intent in begins.values():
        rec = {"ev": "settle", "id": intent["id"], "op": "begin", "outcome": "not_begun"}
        log.write(rec)
        st.on_settle(rec)

    for intent in list(st.pending.values()):
        m = st.models[intent["tx"]]
        db = await db_snapshot(engine, m.tx)
        outcome = next((label for label, c in candidates(m, intent, db) if not diff(c, db)), None)
        if outcome is None:
            bad(
                f"{m.tx} ({m.tag}): the interrupted call `{describe(intent)}` left a state no "
                f"legal outcome explains; model before the call {m.snapshot()}, store {db}"
            )
            outcome = "unexplained"
        elif (
            intent["op"] == "step"
            and intent["tool"] == "ledger.add"
            and not intent["may_fail"]
            and outcome == "not_applied"
            and intent["args"]["entry"] in ledger_entries(ledger)[0]
        ):
            # The call reached the outside system, so the kill came inside the tool: the step
            # must be OUTCOME_UNKNOWN (or done), not silently dropped. (A call meant to fail
            # writes its entry and fails; its rewind to the same step looks the same, and the
            # ledger check then wants the entry reversed once.)
            bad(
                f"{m.tx} ({m.tag}): `{describe(intent)}` was killed after writing its ledger "
                f"entry, yet recovery dropped the step instead of marking it OUTCOME_UNKNOWN"
            )
        rec = {"ev": "settle", "id": intent["id"], "op": intent["op"], "tx": m.tx}
        rec.update(outcome=outcome, db=db, tool=intent.get("tool", ""))
        log.write(rec)
        st.on_settle(rec)

    for m in sorted(st.models.values(), key=lambda m: m.tx):
        if not (full or m.dirty or m.status == ACTIVE):
            continue
        db = await db_snapshot(engine, m.tx)
        problems = diff(m.snapshot(), db)
        if problems:
            bad(f"{m.tx} ({m.tag}) differs from what the agent was told: {'; '.join(problems)}")
            rec = {"ev": "resync", "tx": m.tx, "db": db}  # follow the store from here on
            log.write(rec)
            st.on_record(rec)
    log.write({"ev": "checked"})
    st.on_record({"ev": "checked"})
    return found


# ---------------------------------------------------------------------------- the agent


class Actor:
    """Makes engine calls for one agent, logging an intent before and an ack after each, and
    keeps the models in step with the answers."""

    def __init__(
        self,
        engine: agenttx.Engine,
        st: Replay,
        log: AckLog,
        rng: random.Random,
        phase: PhaseFile | None = None,
    ) -> None:
        self.engine = engine
        self.st = st
        self.log = log
        self.rng = rng
        self.phase = phase
        self.ledger = Path(engine.config.fs_root).parent / LEDGER

    def _intent(self, op: str, m: TxModel | None, **fields: Any) -> dict[str, Any]:
        rec = {"ev": "intent", "op": op, "id": self.log.new_id(), "tx": m.tx if m else None}
        rec.update(fields)
        self.log.write(rec)
        self.st.on_intent(rec)
        if self.phase is not None:
            self.phase.set(f"step:{fields['tool']}" if op == "step" else op)
        return rec

    def _ack(self, intent: dict[str, Any], **fields: Any) -> None:
        rec = {"ev": "ack", "id": intent["id"], "op": intent["op"], "tx": intent["tx"]}
        rec.update(fields)
        self.log.write(rec)
        self.st.on_ack(rec)

    def _violation(self, text: str) -> None:
        rec = {"ev": "violation", "text": text}
        self.log.write(rec)
        self.st.violations.append({"actor": self.log.actor, **rec})

    def _unexpected(self, intent: dict[str, Any], m: TxModel | None, exc: BaseException) -> None:
        # The call stays without an ack; the next reconciliation settles it from the store.
        tb = "".join(traceback.format_exception(exc))[-2000:]
        self._violation(f"{describe(intent)} on {intent['tx']} raised {exc!r}\n{tb}")
        if m is not None:
            m.lost = True

    async def begin(self, tag: str) -> TxModel | None:
        intent = self._intent("begin", None, tag=tag)
        try:
            b = await self.engine.begin(agent_id=self.log.actor, metadata={"tag": tag})
        except Exception as exc:
            self._unexpected(intent, None, exc)
            return None
        self._ack(intent, tx=b.transaction_id, status=b.transaction_status.value, next=1)
        return self.st.models[b.transaction_id]

    async def step(self, m: TxModel, tool: str, args: dict[str, Any], may_fail: bool) -> None:
        k = m.next
        intent = self._intent("step", m, step=k, tool=tool, args=args, may_fail=may_fail)
        try:
            r = await self.engine.execute_step(m.tx, k, tool, args)
        except Exception as exc:
            self._unexpected(intent, m, exc)
            return
        if r.status is not StepStatus.SUCCESS and not may_fail:
            self._violation(f"{m.tx}: step {k} {tool} ended {r.status.value}: {r.clean_hint}")
        if r.compensation_errors:
            self._violation(f"{m.tx}: compensation errors {r.compensation_errors}")
        self._ack(
            intent,
            step_status=r.status.value,
            status=r.transaction_status.value,
            next=r.next_step_id,
            strategy=r.strategy.value,
        )

    async def rewind(self, m: TxModel, to: int) -> None:
        intent = self._intent("rewind", m, to=to)
        try:
            r = await self.engine.rollback(m.tx, to_step=to)
        except Exception as exc:
            self._unexpected(intent, m, exc)
            return
        self._ack(intent, status=r.transaction_status.value, next=r.next_step_id)

    async def abort(self, m: TxModel) -> None:
        intent = self._intent("abort", m)
        try:
            r = await self.engine.rollback(m.tx, reason="crash test abort")
        except Exception as exc:
            self._unexpected(intent, m, exc)
            return
        if r.compensation_errors:
            self._violation(f"{m.tx}: compensation errors {r.compensation_errors}")
        self._ack(intent, status=r.transaction_status.value, next=0)

    async def commit(self, m: TxModel) -> None:
        intent = self._intent(
            "commit",
            m,
            writes=m.writes(),
            effects=sorted(m.effects()),
            entries=sorted(m.entries()),
            files=sorted(m.files()),
        )
        try:
            c = await self.engine.commit(m.tx)
        except agenttx.CommitConflict as exc:
            if not m.writes_shared():
                self._violation(f"{m.tx}: commit conflict without a shared write: {exc}")
            self._ack(intent, ok=False, status=TxStatus.FAILED.value, next=0, keys=exc.keys)
            return
        except Exception as exc:
            self._unexpected(intent, m, exc)
            return
        self._ack(
            intent,
            ok=True,
            status=c.transaction_status.value,
            next=0,
            effects_queued=c.effects_queued,
            effects_dispatched=c.effects_dispatched,
        )

    async def resolve(self, m: TxModel) -> None:
        """Settle an OUTCOME_UNKNOWN ledger step the way an operator would: look the entry up
        in the ledger."""
        entry = m.unknown_args["entry"]
        happened = entry in ledger_entries(self.ledger)[0]
        k = m.unknown
        intent = self._intent("resolve", m, step=k, happened=happened, entry=entry)
        output = {"entry": entry, "amount": m.unknown_args["amount"]} if happened else None
        try:
            await self.engine.resolve_outcome(m.tx, k, happened=happened, output=output)
        except Exception as exc:
            self._unexpected(intent, m, exc)
            return
        self._ack(intent, status=ACTIVE, next=k + 1 if happened else k)

    def next_op(self, m: TxModel) -> tuple[str, dict[str, Any], bool]:
        """A random step for ``m``: (tool, arguments, may fail)."""
        rng, tag, u = self.rng, m.tag, self.log.uid()
        writes = m.writes()
        args: dict[str, Any]
        own_kv = sorted(
            k for k, v in writes.items() if k.startswith("kv/") and not is_shared(k) and v
        )
        r = rng.random()
        if r < 0.06:
            value: dict[str, Any] = {"tag": tag, "u": u}
            return "kv.put", {"key": f"shared/{rng.randrange(SHARED_KEYS)}", "value": value}, False
        if r < 0.16:
            fields = {"tag": tag, "n": rng.randrange(100)}
            return "record.insert", {"table": "rec", "id": f"{tag}.{u}", "fields": fields}, False
        if r < 0.20:
            parents = sorted(k for k in writes if k.startswith("records/rec/") and writes[k])
            if parents:
                fields = {"tag": tag, "parent": rng.choice(parents).split("/", 2)[2]}
                args = {"table": "child", "id": f"{tag}.{u}", "fields": fields}
                return "record.insert", {**args, "references": {"parent": "rec"}}, False
        if r < 0.23:  # a missing parent: the step fails and the controller rewinds
            fields = {"tag": tag, "parent": f"{tag}.none{u}"}
            args = {"table": "child", "id": f"{tag}.{u}", "fields": fields}
            return "record.insert", {**args, "references": {"parent": "rec"}}, True
        if r < 0.34:
            files = sorted(m.files())
            path = rng.choice(files) if files and rng.random() < 0.3 else f"{tag}/{u}.txt"
            return "fs.write", {"path": path, "contents": f"{u} {rng.randrange(10**6)}"}, False
        if r < 0.46:
            args = {"channel": rng.choice(["email", "webhook"]), "payload": {"tag": tag, "u": u}}
            return "effect.stage", {**args, "idempotency_key": f"{tag}/{u}"}, False
        if r < 0.58:
            return "ledger.add", {"entry": f"{tag}/{u}", "amount": rng.randint(1, 100)}, False
        if r < 0.60:  # written, then failed: the failed attempt's own undo must reverse it
            args = {"entry": f"{tag}/{u}", "amount": rng.randint(1, 100), "reject": True}
            return "ledger.add", args, True
        if r < 0.63:
            return "note.put", {"key": f"{tag}/{u}", "text": f"note {rng.randrange(1000)}"}, False
        if r < 0.67 and own_kv:
            return "kv.get", {"key": rng.choice(own_kv)[3:]}, False
        if r < 0.70 and own_kv:
            return "kv.delete", {"key": rng.choice(own_kv)[3:]}, False
        if r < 0.75:  # a missing key: the step fails and the controller rewinds or aborts
            return "kv.get", {"key": f"{tag}/missing{u}"}, True
        value = {"tag": tag, "u": u, "v": rng.randrange(1000)}
        return "kv.put", {"key": f"{tag}/{u}", "value": value}, False

    def usable(self, m: TxModel) -> bool:
        return m.status == ACTIVE and not m.lost

    async def settle_unknown(self, m: TxModel) -> None:
        """Deal with a pending OUTCOME_UNKNOWN step: resolve it, rewind past it or abort."""
        r = self.rng.random()
        if r < 0.6:
            await self.resolve(m)
        elif r < 0.8 and m.unknown > 1:
            await self.rewind(m, self.rng.randint(1, m.unknown - 1))
        else:
            await self.abort(m)

    async def drive(self, m: TxModel, steps: int, end: str) -> None:
        """Run up to ``steps`` random steps (and sometimes manual rewinds), then ``end`` it:
        ``commit``, ``abort`` or ``leave`` (open, for later)."""
        if m.unknown and self.usable(m):
            await self.settle_unknown(m)
        for _ in range(steps):
            if not self.usable(m):
                return
            if m.next > 1 and self.rng.random() < 0.08:
                await self.rewind(m, self.rng.randint(1, m.next - 1))
                continue
            await self.step(m, *self.next_op(m))
        if not self.usable(m):
            return
        if end == "commit":
            await self.commit(m)
        elif end == "abort":
            await self.abort(m)


# ---------------------------------------------------------------------------- the worker


class DeliveryTap:
    """Wraps the dispatcher's default channel: records every delivery attempt (the JSON-lines
    channel dedupes by key, so its file alone cannot show a repeated or forbidden attempt) and
    the phase."""

    def __init__(self, inner: agenttx.Channel, d: Path, phase: PhaseFile | None) -> None:
        self.inner = inner
        self.path = d / DELIVERIES
        self.phase = phase

    async def deliver(self, effect: agenttx.Effect) -> None:
        if self.phase is not None:
            self.phase.set("deliver")
        record = {"key": effect.idempotency_key, "tx": effect.tx_id, "attempt": effect.attempt}
        append_line(self.path, {**record, "outbox_id": effect.id, "ev": "attempt"})
        await self.inner.deliver(effect)
        # Written (and fsynced) between the channel's write and the dispatcher settling the
        # row: it widens the window in which a kill makes the row be delivered again.
        append_line(self.path, {**record, "outbox_id": effect.id, "ev": "delivered"})


def tap_deliveries(engine: agenttx.Engine, d: Path, phase: PhaseFile | None) -> None:
    if engine.dispatcher.default is not None:
        engine.dispatcher.default = DeliveryTap(engine.dispatcher.default, d, phase)


async def agent_loop(actor: Actor, pool: list[TxModel], agent: int, run: int, txs: int) -> None:
    rng = actor.rng
    n = 0
    while txs == 0 or n < txs:
        n += 1
        if pool and rng.random() < 0.35:
            m: TxModel | None = pool.pop(rng.randrange(len(pool)))
        else:
            m = await actor.begin(f"T{run}x{agent}x{n}")
        if m is None:
            continue
        r = rng.random()
        end = "commit" if r < 0.62 else "abort" if r < 0.84 else "leave"
        if end == "leave" and len(pool) >= MAX_POOL:
            end = "commit"
        await actor.drive(m, rng.randint(1, 7), end)
        if actor.usable(m) and end != "abort":
            pool.append(m)  # left open, or the commit was refused (unknown step): later
        if actor.phase is not None:
            actor.phase.set("agent")


async def run_worker(d: Path, seed: int, run: int, agents: int, txs: int) -> None:
    phase = PhaseFile(d / PHASE)
    phase.set("open")
    print("opening", flush=True)
    engine = await open_engine(d)
    tap_deliveries(engine, d, phase)
    log = AckLog(d / ACKS, f"r{run}")
    log.write({"ev": "start", "pid": os.getpid(), "seed": seed})
    phase.set("reconcile")
    st = replay(d / ACKS)
    await reconcile(engine, st, log, full=False)
    pool = sorted((m for m in st.models.values() if m.status == ACTIVE), key=lambda m: m.tx)
    phase.set("agent")
    print("ready", flush=True)
    actors = [Actor(engine, st, log, random.Random(f"{seed}:{a}"), phase) for a in range(agents)]
    await asyncio.gather(*(agent_loop(actors[a], pool, a, run, txs) for a in range(agents)))
    phase.set("close")
    await engine.close()
    log.close()
    print("done", flush=True)


def main(argv: Iterable[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("seed", type=int)
    p.add_argument("--run", type=int, default=1, help="run number (names this run's writes)")
    p.add_argument("--agents", type=int, default=2, help="concurrent agents")
    p.add_argument("--txs", type=int, default=0, help="transactions per agent (0: forever)")
    a = p.parse_args(list(argv) if argv is not None else None)
    a.dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(run_worker(a.dir, a.seed, a.run, a.agents, a.txs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
