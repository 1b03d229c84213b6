"""Crash harness: SIGKILL a worker running transactions at random points, reopen, check.

How kill points are chosen
    ``tests/crash_worker.py`` runs a dense randomized workload (no sleeps): two concurrent
    agents begin transactions and run kv.put / kv.delete / kv.get / record.insert / fs.write /
    effect.stage and two user tools: ``ledger.add`` (compensatable, not idempotent: it appends
    to an outside ledger after registering its undo; sometimes it fails after the append) and
    ``note.put`` (a plain ``def`` state tool, run on a worker thread). They make failing steps
    (a missing key, a missing foreign-key parent, a rejected ledger entry) so the controller
    rewinds or aborts, rewind by hand with ``rollback(tx, to_step=k)``, commit (sometimes
    conflicting on the keys ``shared/<n>``), abort, or leave transactions open for a later run
    to resume. The
    harness starts it, waits for its ``ready`` line (printed once recovery and reconciliation
    are done) and kills it with SIGKILL after a delay drawn from a seeded RNG (20–300 ms). One
    kill in ten is instead timed 0–60 ms after the ``opening`` line, so it lands inside
    ``Engine.open``'s recovery of the previous crash or the worker's reconciliation. Kills run
    in chains on one directory (kill, check, restart, kill …); after one kill in four the
    harness restarts the worker without checking, so the worker's own ``Engine.open`` recovers
    the crash — and a kill during that recovery makes the next open recover a recovery. The
    phase the worker was in at each kill (``<dir>/phase``: the call either agent started last,
    or ``deliver`` while an effect goes out) and how every interrupted call ended are printed
    as histograms. Chains run two at a time, one per core. The checker's engine runs its
    clock a few seconds ahead, so delivery leases a killed worker held have expired for it
    (no waiting); the worker's pid is reaped before recovery, so its running steps count as
    dead at once.

What the checker knows
    The worker appends (fsynced) an *intent* line before every engine call and an *ack* line
    after it returns (``acks.jsonl``). Replaying the log gives, per transaction, what the agent
    was told: status, next step, the live steps with their arguments. A call killed between
    intent and ack is *settled* by the next reconciler (``crash_worker.reconcile``): it reads
    the transaction from the store and accepts only outcomes the call may legally have had —

    - a step: not there (state tools leave no trace; an interrupted idempotent outside tool is
      undone and may be sent again), done, OUTCOME_UNKNOWN (only ``ledger.add``, an outside
      tool that is not idempotent; and "not there" only if its entry never reached the
      ledger), or — only for steps meant to fail — rewound or aborted;
    - a rewind, abort, commit or outcome resolution: not done, or done (a commit may also end
      FAILED by a conflict, only if it wrote a shared key).

Invariants checked after every checked kill (once recovery ran and the dispatcher drained)
    1. No transaction is left EXECUTING, ROLLING_BACK or COMMITTING; every open one is ACTIVE,
       with ``outcome_unknown_step`` set only after a kill inside ``ledger.add``; none needs a
       human. Every transaction matches what the agent was told (status, next step, live steps
       and their arguments); an acknowledged commit is COMMITTED, an acknowledged abort stays
       aborted.
    2. Committed writes are not lost: every write of a COMMITTED transaction is in the
       versioned store at one commit version shared by all its writes, and is what a reader
       sees (``store.read_state`` and, for a sample, ``kv.get``/``record.get`` in a new
       transaction) unless a later commit wrote the same key.
    3. No aborted write is visible: every stored version belongs to a COMMITTED transaction and
       equals what its live steps wrote; keys written only by aborted transactions or by
       rewound steps read as absent.
    4. Files (``fs.write``, an outside effect undone by restoring the prior bytes): the sandbox
       holds exactly the files of the live steps of committed and open transactions.
    5. Ledger: each entry id is applied at most once; an entry of a live step of a committed or
       open transaction has no reversal; every other entry (aborted transaction, rewound step)
       has exactly one reversal — the undo ran once in effect, although a crash may make the
       engine call the undo handler again (``undo_calls.jsonl`` counts such re-runs; the
       handler is idempotent by entry id).
       OUTCOME_UNKNOWN entries: while the step is unresolved its undo stays pending, so the
       entry (if the kill came after the append) has no reversal yet. The checker or a later
       worker settles it as an operator would: it looks the entry up in the ledger and calls
       ``resolve_outcome(happened=...)``, after which it is an ordinary live step (or none),
       or it rewinds past the step / aborts, which runs the undo registered before the call:
       one reversal if the entry was written, none if the kill came between ``register_undo``
       and the append (the undo handler finds no entry and does nothing).
    6. Outbox: after draining, every effect staged by a live step of a COMMITTED transaction is
       queued exactly once (one outbox row) and in ``outbox.jsonl`` with its idempotency key,
       exactly once (the JSON-lines channel dedupes by key); no key appears twice; no effect
       of an aborted or open transaction, or of a rewound step, is queued, appears, or is even
       attempted (every ``deliver`` call is recorded, since the file alone hides repeats);
       no outbox row is left pending, in delivery or dead. Repeated attempts of a committed
       effect after a crash are legal (at least once) and counted.
    7. Undo records of ended transactions are gone, except those a commit kept for a later
       compensation (``undo_kept``): pending, of a step the committed transaction had live;
       pending ones of an open transaction belong to its live steps or its unknown step.

    Open transactions are then continued as a user would: with a seeded choice the checker
    leaves one open (a later worker resumes it), or resolves its unknown step, takes a further
    step, rewinds, commits or rolls it back; the invariants are checked again. At the end of a
    chain every open transaction is ended and everything is compared with the store once more.

CI runs ``test_crash_kill_points`` (56 kill points). ``test_crash_stress`` (marked ``stress``)
runs 1,000 (100 chains of 10) with ``AGENTTX_STRESS=1`` and a bounded 8 otherwise.
``AGENTTX_CRASH_SEED`` changes the seed; with a fixed seed the workload, delays and checker
choices repeat (where exactly a kill lands still depends on timing).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import os
import random
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import agenttx
import crash_worker as cw
from agenttx import TxStatus
from agenttx.tools.builtin.fs import TMP_SUFFIX
from paths import TESTS

WORKER = TESTS.joinpath("crash_worker.py")
SEED = int(os.environ.get("AGENTTX_CRASH_SEED", "20240611"))
# The checker's clock runs ahead, so delivery leases a killed worker held are expired for it.
CLOCK_SKEW_S = 5.0
READY_TIMEOUT_S = 60.0
KILL_AFTER_READY_S = (0.020, 0.300)
KILL_AFTER_OPENING_S = (0.0, 0.060)


@dataclass
class Campaign:
    kills: int = 0
    checks: int = 0
    phases: collections.Counter[str] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    undo_reruns: int = 0
    redeliveries: int = 0
    violations: list[str] = field(default_factory=list)
    totals: collections.Counter[str] = field(default_factory=collections.Counter)

    def report(self, elapsed: float) -> str:
        lines = [
            f"crash campaign: {self.kills} kill points, {self.checks} checked restarts, "
            f"{elapsed:.1f} s",
            "phase at the kill (the worker's last started call):",
            *(f"  {n:5d}  {p}" for p, n in self.phases.most_common()),
            "how interrupted calls ended (settled from the store after the restart):",
            *(f"  {n:5d}  {o}" for o, n in self.outcomes.most_common()),
            f"undo handler re-runs after a crash (absorbed by idempotency): {self.undo_reruns}",
            f"effect delivery attempts repeated after a crash (same key): {self.redeliveries}",
            "totals: " + ", ".join(f"{k}={v}" for k, v in sorted(self.totals.items())),
            f"violations: {len(self.violations)}",
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------------- the worker


def _wait_for(proc: subprocess.Popen[bytes], want: str, buf: bytearray, err: Path) -> None:
    """Read the worker's stdout until the line ``want`` (no sleeping: select on the pipe)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + READY_TIMEOUT_S
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            lines = buf.split(b"\n")
            for i, line in enumerate(lines[:-1]):
                if line.decode().strip() == want:
                    del buf[: sum(len(x) + 1 for x in lines[: i + 1])]
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                proc.kill()
                raise AssertionError(f"worker did not print {want!r} in {READY_TIMEOUT_S} s")
            if not sel.select(remaining):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                proc.wait()
                raise AssertionError(
                    f"worker exited (rc={proc.returncode}) before {want!r}:\n"
                    + err.read_text()[-4000:]
                )
            buf.extend(chunk)


def kill_worker(d: Path, run: int, seed: int, rng: random.Random, camp: Campaign) -> None:
    err = d / f"worker-{run}.stderr"
    at_opening = rng.random() < 0.1
    delay = rng.uniform(*(KILL_AFTER_OPENING_S if at_opening else KILL_AFTER_READY_S))
    with open(err, "wb") as err_f:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(d), str(seed), "--run", str(run)],
            stdout=subprocess.PIPE,
            stderr=err_f,
        )
    try:
        buf = bytearray()
        _wait_for(proc, "opening", buf, err)
        if not at_opening:
            _wait_for(proc, "ready", buf, err)
        time.sleep(delay)  # the deliberate random kill delay
        if proc.poll() is not None:
            raise AssertionError(
                f"worker run {run} exited by itself (rc={proc.returncode}):\n"
                + err.read_text()[-4000:]
            )
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()  # reap it: recovery must see the pid gone, not a zombie
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, err.read_text()[-4000:])
    camp.kills += 1
    camp.phases[cw.PhaseFile.read(d / cw.PHASE)] += 1


# ---------------------------------------------------------------------------- the checker


class Checker:
    """One checked restart: reopen (recovery), reconcile the log, drain, check, continue."""

    def __init__(self, d: Path, engine: agenttx.Engine, st: cw.Replay, log: cw.AckLog) -> None:
        self.d = d
        self.engine = engine
        self.st = st
        self.log = log
        self.redeliveries = 0

    def bad(self, text: str) -> None:
        rec = {"ev": "violation", "text": text}
        self.log.write(rec)
        self.st.violations.append({"actor": self.log.actor, **rec})

    async def drain(self) -> None:
        while await self.engine.dispatcher.run_once():
            pass

    def _models(self, *statuses: str) -> list[cw.TxModel]:
        return [m for m in self.st.models.values() if m.status in statuses]

    def _model_for(self, name: str) -> cw.TxModel | None:
        return self.st.by_tag.get(cw.tag_of(name))

    async def check_state(self, sample: random.Random) -> None:
        """Invariants 2 and 3: the versioned store against the committed models."""
        committed = self._models(cw.COMMITTED)
        expected = {m.tx: m.writes() for m in committed}
        with sqlite3.connect(f"file:{self.d / cw.DB}?mode=ro", uri=True) as conn:
            rows = conn.execute(
                "SELECT key, version, value FROM kv WHERE tenant = ? ORDER BY key, version",
                (cw.TENANT,),
            ).fetchall()
        version_of: dict[str, int] = {}
        tx_of_version: dict[int, str] = {}
        latest: dict[str, int] = {}
        stored: set[tuple[str, int]] = set()
        for key, version, raw in rows:
            value = None if raw is None else json.loads(raw)
            latest[key] = max(latest.get(key, 0), version)
            stored.add((key, version))
            if cw.is_shared(key):
                tag = value.get("tag", "") if isinstance(value, dict) else ""
            else:
                name = key.split("/", 2)[2] if key.startswith("records/") else key.split("/", 1)[1]
                tag = cw.tag_of(name)
            m = self.st.by_tag.get(tag)
            if m is None or m.status != cw.COMMITTED:
                status = m.status if m else "unknown"
                self.bad(f"stored {key}@{version}={raw} belongs to a {status} transaction ({tag})")
                continue
            if key not in expected[m.tx] or expected[m.tx][key] != value:
                want = expected[m.tx].get(key, "<not written by a live step>")
                self.bad(f"stored {key}@{version}={raw}, but {m.tx} ({tag}) committed {want!r}")
            if version_of.setdefault(m.tx, version) != version:
                self.bad(f"{m.tx} ({tag}) has writes at versions {version_of[m.tx]} and {version}")
            if tx_of_version.setdefault(version, m.tx) != m.tx:
                self.bad(f"version {version} holds writes of {tx_of_version[version]} and {m.tx}")
        store = self.engine.store
        readers: list[tuple[str, Any]] = []
        for m in committed:
            for key, value in expected[m.tx].items():
                version = version_of.get(m.tx)
                if version is None or (key, version) not in stored:
                    # Only a newer version may have replaced it (pruning keeps the newest).
                    if key not in latest or (version is not None and latest[key] < version):
                        self.bad(f"committed write lost: {m.tx} ({m.tag}) wrote {key}={value!r}")
                    continue
                seen, seen_version = await store.read_state(cw.TENANT, key, None)
                if seen_version != latest.get(key):
                    self.bad(f"{key} reads version {seen_version}, the newest is {latest.get(key)}")
                elif seen_version == version:
                    if (None if seen is None else json.loads(seen)) != value:
                        self.bad(f"{key} reads {seen}, committed {value!r} by {m.tx}")
                    elif value is not None and key.startswith(("kv/", "records/")):
                        readers.append((key, value))
                # else a later commit overwrote it; its row was checked above
            for key in m.keys_ever - expected[m.tx].keys():
                if not cw.is_shared(key) and await store.read_state(cw.TENANT, key, None) != (
                    None,
                    0,
                ):
                    self.bad(f"{key}, written only by a rewound step of {m.tx}, is visible")
        for m in self._models(*cw.ABORTED):
            for key in m.keys_ever:
                if not cw.is_shared(key) and await store.read_state(cw.TENANT, key, None) != (
                    None,
                    0,
                ):
                    self.bad(f"{key} of aborted {m.tx} ({m.tag}, {m.status}) is visible")
        await self._read_back(sample.sample(readers, min(4, len(readers))))

    async def _read_back(self, picks: list[tuple[str, Any]]) -> None:
        """Read a few committed values back through a new transaction, as a user would."""
        if not picks:
            return
        tx = (await self.engine.begin(agent_id="reader", metadata={"tag": "reader"})).transaction_id
        for i, (key, value) in enumerate(picks, start=1):
            if key.startswith("kv/"):
                r = await self.engine.execute_step(tx, i, "kv.get", {"key": key[3:]})
                got = r.output.get("value") if isinstance(r.output, dict) else None
            else:
                _, table, row_id = key.split("/", 2)
                r = await self.engine.execute_step(
                    tx, i, "record.get", {"table": table, "id": row_id}
                )
                got = r.output
            if r.status is not agenttx.StepStatus.SUCCESS or got != value:
                self.bad(f"reading {key} in a new transaction gave {r.status.value} {got!r}")
                break
        with contextlib.suppress(agenttx.NotActive):  # a failed read may have aborted it
            await self.engine.rollback(tx)

    def check_files(self) -> None:
        """Invariant 4."""
        want: dict[str, str] = {}
        for model in self._models(cw.COMMITTED, cw.ACTIVE):
            want.update(model.files())
        root = self.d / cw.FILES
        have: dict[str, str] = {}
        if root.exists():
            for file in root.rglob("*"):
                if file.is_file() and not file.name.endswith(TMP_SUFFIX):
                    have[file.relative_to(root).as_posix()] = file.read_text()
        for path in sorted(want.keys() | have.keys()):
            if want.get(path) != have.get(path):
                m = self._model_for(path)
                who = f"{m.tx} {m.status}" if m else "no transaction"
                self.bad(
                    f"file {path}: expected {want.get(path)!r}, found {have.get(path)!r} ({who})"
                )

    def check_ledger(self) -> int:
        """Invariant 5. Returns how often the undo handler ran again for a reversed entry."""
        entries, reversals = cw.ledger_entries(self.d / cw.LEDGER)
        keep: set[str] = set()
        pending: set[str] = set()
        for model in self._models(cw.COMMITTED, cw.ACTIVE):
            keep.update(model.entries())
            if model.unknown and isinstance(model.unknown_args, dict):
                pending.add(model.unknown_args.get("entry", ""))
        for entry, lines in entries.items():
            m = self._model_for(entry)
            state = f"{m.tx} {m.status}" if m else "no transaction"
            if len(lines) != 1:
                self.bad(f"ledger entry {entry} applied {len(lines)} times ({state})")
            want = 0 if entry in keep or entry in pending else 1
            if reversals.get(entry, 0) != want:
                self.bad(
                    f"ledger entry {entry} ({state}) has {reversals.get(entry, 0)} reversals, "
                    f"expected {want}"
                )
        for entry in reversals.keys() - entries.keys():
            self.bad(f"ledger reversal of {entry}, which was never applied")
        for entry in keep - entries.keys():
            m = self._model_for(entry)
            self.bad(f"ledger entry {entry} of a live step of {m.tx if m else '?'} is missing")
        calls = collections.Counter(r["entry"] for r in cw.read_jsonl(self.d / cw.UNDO_CALLS))
        return sum(n - 1 for n in calls.values() if n > 1)

    async def check_outbox(self) -> None:
        """Invariant 6 (after draining)."""
        want: dict[str, tuple[str, str, Any]] = {}
        for model in self._models(cw.COMMITTED):
            for key, (channel, payload) in model.effects().items():
                want[key] = (model.tx, channel, payload)
        seen: collections.Counter[str] = collections.Counter()
        for rec in cw.read_jsonl(self.d / cw.OUTBOX):
            key = rec.get("idempotency_key", "")
            seen[key] += 1
            if key not in want:
                m = self._model_for(key)
                state = f"{m.tx} {m.status}" if m else "no transaction"
                self.bad(f"outbox has effect {key} that no committed live step staged ({state})")
            elif (rec.get("tx_id"), rec.get("channel"), rec.get("payload")) != want[key]:
                self.bad(f"outbox effect {key} is {rec}, expected {want[key]}")
        for key, n in seen.items():
            if n > 1:
                self.bad(f"outbox effect {key} delivered {n} times")
        for key in want.keys() - seen.keys():
            self.bad(f"effect {key} of committed {want[key][0]} was never delivered")
        with sqlite3.connect(f"file:{self.d / cw.DB}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT id, tx_id, idempotency_key, status FROM outbox").fetchall()
        queued: collections.Counter[str] = collections.Counter()
        for row_id, tx, key, status in rows:
            queued[key] += 1
            if status != "delivered":
                self.bad(f"outbox row {row_id} ({key}) left {status} after draining")
            if want.get(key, ("",))[0] != tx:
                self.bad(f"outbox row {row_id} ({key} of {tx}) is no committed live effect")
        for key in want:
            if queued[key] != 1:
                self.bad(f"effect {key} of committed {want[key][0]} queued {queued[key]} times")
        attempts: collections.Counter[str] = collections.Counter()
        for rec in cw.read_jsonl(self.d / cw.DELIVERIES):
            if rec["ev"] != "attempt":
                continue
            attempts[rec["key"]] += 1
            if rec["key"] not in want:
                self.bad(f"delivery attempted for {rec['key']} of {rec['tx']}: not committed")
        self.redeliveries = sum(n - 1 for n in attempts.values())

    def check_undo_rows(self) -> None:
        """Invariant 7."""
        with sqlite3.connect(f"file:{self.d / cw.DB}?mode=ro", uri=True) as conn:
            rows = conn.execute(
                "SELECT u.tx_id, u.step_id, u.status, k.undo_id IS NOT NULL FROM undo u "
                "LEFT JOIN undo_kept k ON k.undo_id = u.id"
            ).fetchall()
        for tx, step, status, kept in rows:
            m = self.st.models.get(tx)
            if kept and m is not None and m.status == cw.COMMITTED:
                if status != "pending" or step not in m.live:
                    self.bad(f"kept undo ({status}) of step {step} of committed {tx} not live")
            elif m is None or m.status != cw.ACTIVE:
                who = m.status if m else "unknown"
                self.bad(f"undo record ({status}) of step {step} left for {who} transaction {tx}")
            elif status == "pending" and not (step < m.next or step == m.unknown):
                self.bad(f"pending undo of step {step} of {tx}, which is not live (next {m.next})")

    async def check_all(self, rng: random.Random) -> int:
        await self.drain()
        await self.check_state(rng)
        self.check_files()
        reruns = self.check_ledger()
        await self.check_outbox()
        self.check_undo_rows()
        return reruns

    async def continue_open(self, actor: cw.Actor, rng: random.Random, *, finish: bool) -> None:
        """Continue each open transaction as a user would (or leave it for the next worker)."""
        for m in sorted(self._models(cw.ACTIVE), key=lambda m: m.tx):
            if not finish and rng.random() < 0.5:
                continue
            if m.unknown:
                await actor.settle_unknown(m)
            if not actor.usable(m):
                continue
            choice = rng.choice(["commit", "abort", "step+commit", "step+abort", "rewind+commit"])
            if choice.startswith("step"):
                await actor.drive(m, 1, "leave")
            elif choice.startswith("rewind") and m.next > 1:
                await actor.rewind(m, rng.randint(1, m.next - 1))
            if actor.usable(m):
                if choice.endswith("commit"):
                    await actor.commit(m)
                else:
                    await actor.abort(m)
            if finish and actor.usable(m):
                await actor.abort(m)


async def check_restart(d: Path, name: str, rng: random.Random, *, final: bool) -> tuple[int, int]:
    """Returns (undo handler re-runs, effect re-deliveries) seen so far in ``d``."""
    engine = await cw.open_engine(d, background=False, clock=lambda: time.time() + CLOCK_SKEW_S)
    cw.tap_deliveries(engine, d, None)
    log = cw.AckLog(d / cw.ACKS, name)
    try:
        st = cw.replay(d / cw.ACKS)
        await cw.reconcile(engine, st, log, full=final)
        checker = Checker(d, engine, st, log)
        await checker.check_all(rng)
        actor = cw.Actor(engine, st, log, rng)
        await checker.continue_open(actor, rng, finish=final)
        await cw.reconcile(engine, st, log, full=final)
        reruns = await checker.check_all(rng)
        if final:
            for t in await cw.list_all(engine, [TxStatus.ACTIVE.value]):
                checker.bad(f"{t.transaction_id} is still open after the final round")
        return reruns, checker.redeliveries
    finally:
        log.close()
        await engine.close()


def run_chain(root: Path, chain: int, kills: int, seed: int) -> Campaign:
    """Kill after kill on one directory; the chain's own RNG keeps it independent of others."""
    rng = random.Random(f"{seed}:{chain}")
    camp = Campaign()
    d = root / f"chain{chain}"
    d.mkdir(parents=True)
    for i in range(1, kills + 1):
        kill_worker(d, i, rng.randrange(2**31), rng, camp)
        if i < kills and rng.random() < 0.25:
            continue  # the next worker's Engine.open recovers this crash
        camp.checks += 1
        asyncio.run(check_restart(d, f"c{i}", random.Random(rng.random()), final=False))
    camp.undo_reruns, camp.redeliveries = asyncio.run(
        check_restart(d, "final", random.Random(rng.random()), final=True)
    )
    st = cw.replay(d / cw.ACKS)
    for s in st.settles:
        intent = s["intent"]
        what = f"step:{intent['tool']}" if intent["op"] == "step" else intent["op"]
        camp.outcomes[f"{what} -> {s['outcome']}"] += 1
    for v in st.violations:
        camp.violations.append(f"chain {chain} [{v.get('actor')}] {v['text']}")
    camp.totals["transactions"] += len(st.models)
    for m in st.models.values():
        camp.totals[m.status.lower()] += 1
    for rec in cw.read_jsonl(d / cw.ACKS):
        if rec.get("ev") != "ack":
            continue
        camp.totals[f"acked {rec['op']}"] += 1
        if rec["op"] == "commit" and not rec["ok"]:
            camp.totals["acked commit conflicts"] += 1
        if rec["op"] == "step" and rec["step_status"] != "SUCCESS":
            camp.totals[f"acked steps {rec['step_status']}/{rec['strategy']}"] += 1
    return camp


def run_campaign(root: Path, *, chains: int, kills_per_chain: int, seed: int) -> Campaign:
    """Chains run two at a time (one worker or checker per core)."""
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        parts = list(pool.map(lambda c: run_chain(root, c, kills_per_chain, seed), range(chains)))
    camp = Campaign()
    for part in parts:
        camp.kills += part.kills
        camp.checks += part.checks
        camp.phases.update(part.phases)
        camp.outcomes.update(part.outcomes)
        camp.undo_reruns += part.undo_reruns
        camp.redeliveries += part.redeliveries
        camp.violations.extend(part.violations)
        camp.totals.update(part.totals)
    print(camp.report(time.monotonic() - started))
    return camp


def _assert_clean(camp: Campaign) -> None:
    shown = "\n".join(camp.violations[:25])
    assert not camp.violations, f"{len(camp.violations)} invariant violations:\n{shown}"


def test_crash_kill_points(tmp_path: Path) -> None:
    camp = run_campaign(tmp_path, chains=7, kills_per_chain=8, seed=SEED)
    assert camp.kills >= 50
    _assert_clean(camp)


@pytest.mark.stress
def test_crash_stress(tmp_path: Path) -> None:
    full = os.environ.get("AGENTTX_STRESS") == "1"
    chains, per_chain = (100, 10) if full else (1, 8)
    camp = run_campaign(tmp_path, chains=chains, kills_per_chain=per_chain, seed=SEED + 1)
    if full:
        assert camp.kills >= 1000
    _assert_clean(camp)


def test_worker_without_kills_leaves_a_consistent_store(tmp_path: Path) -> None:
    """The checker's own sanity: a worker that runs to the end violates nothing."""
    d = tmp_path / "clean"
    d.mkdir()
    subprocess.run(
        [sys.executable, str(WORKER), str(d), str(SEED), "--run", "1", "--txs", "25"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    asyncio.run(check_restart(d, "final", random.Random(SEED), final=True))
    st = cw.replay(d / cw.ACKS)
    assert not st.settles, "a worker that ran to the end leaves no call unanswered"
    assert not st.violations, [v["text"] for v in st.violations]
    assert any(m.status == cw.COMMITTED for m in st.models.values())
    assert any(m.status in cw.ABORTED for m in st.models.values())
