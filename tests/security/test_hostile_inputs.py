"""Hostile inputs over real gRPC, against ``agenttx serve`` in a subprocess, built-in tools only.

For each class of the hardening issue (points 1-3) and inputs of our own beyond its examples,
every hostile call must be:

- answered within a bound (``ANSWER_S``), with a step failure or a refusal naming the problem;
- never INTERNAL (nor UNKNOWN);
- harmless to others: a second client calling all along (``Probe``) never waits more than
  100 ms for an answer while the hostile call runs (100 ms of an idle machine's time: on a
  busy one the wait is divided by how much slower the machine runs right now, see
  ``hostile``);
- harmless to state: the hostile transaction keeps its earlier steps and state, nothing of the
  hostile step is stored beyond its sent arguments, no file or outbox line appears, and the
  history stays readable (``GetTransaction`` and ``ListSteps``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from agenttx.wire import agenttx_pb2 as pb
from server_process import ServerProcess, start_server

pytestmark = pytest.mark.serial  # measures time: runs alone, after the parallel run (conftest.py)

# Hostile calls must be answered (deadline) within this. They take well under a second on an
# idle machine; the long-history reads took 10.1 s pinned to one busy core, so the bound is
# what tells a hang or a blow-up from a slow machine, not a speed target.
ANSWER_S = 30.0
DELAY_MS = 100.0  # the most a concurrent client's call may wait meanwhile, for the hostile call
ATTEMPTS = 5  # measurements of a worst wait over DELAY_MS before it counts
ONE_MB = "x" * 1_000_000


@dataclass
class Server:
    process: ServerProcess
    channel: grpc.Channel
    stub: Any
    data_dir: Path

    def begin(self) -> str:
        return str(self.stub.BeginTransaction(pb.BeginTransactionRequest()).transaction_id)

    def step(self, tx: str, step_id: int, tool: str, arguments_json: str) -> Any:
        return self.stub.ExecuteStep(
            pb.ExecuteStepRequest(
                transaction_id=tx, step_id=step_id, tool_name=tool, arguments_json=arguments_json
            ),
            timeout=ANSWER_S,
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("hostile") / "data"
    process = start_server(data_dir, "--metrics-addr", "off", timeout=60)
    channel = process.channel()
    try:
        yield Server(process, channel, process.stub(channel), data_dir)
    finally:
        channel.close()
        process.terminate()


@dataclass
class Probe:
    """Another client: ``GetTransaction`` on its own transaction, over and over, on its own
    channel; records each call's latency while running."""

    server: Server
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with grpc.insecure_channel(self.server.process.address) as channel:
            stub = type(self.server.stub)(channel)
            tx = stub.BeginTransaction(pb.BeginTransactionRequest(agent_id="probe"))
            request = pb.GetTransactionRequest(transaction_id=tx.transaction_id)
            stub.GetTransaction(request)  # connected and warm before timing starts
            self.ready.set()
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    stub.GetTransaction(request, timeout=ANSWER_S)
                except grpc.RpcError as exc:
                    self.errors.append(str(exc.code()))
                self.latencies_ms.append((time.perf_counter() - start) * 1000)
                time.sleep(0.005)

    def __post_init__(self) -> None:
        self.ready = threading.Event()

    def around(self, call: Callable[[], Any]) -> Any:
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        assert self.ready.wait(ANSWER_S)
        time.sleep(0.02)
        try:
            return call()
        finally:
            time.sleep(0.02)
            self._stop.set()
            thread.join(10)


def slowdown() -> float:
    """How many times longer than its CPU time a fixed piece of pure-Python work takes on
    this machine right now: 1.0 when idle, 3 or more with every core taken. A stall of the
    server's interpreter (one C call holding it, a collection) lasts that many times its CPU
    time, since the server waits for a core as this work does."""
    wall, cpu = time.perf_counter(), time.thread_time()
    while time.thread_time() - cpu < 0.02:  # 20 ms of this thread's CPU
        sum(range(1000))
    return max(1.0, (time.perf_counter() - wall) / (time.thread_time() - cpu))


def hostile(
    server: Server, setup: Callable[[], str], call: Callable[[str], Any]
) -> tuple[Any, float, str]:
    """``call(tx)`` on a fresh ``tx = setup()`` while a probe runs; returns (its result or
    RpcError, the probe's worst wait, tx). A real stall repeats; a scheduler hiccup on this
    shared machine does not: a worst wait over the bound is measured again (up to
    ``ATTEMPTS`` times, each on a fresh transaction) before it counts. A wait over the bound
    is counted in idle-machine time: divided by ``slowdown()``, the lesser of the values
    measured just before and just after the call. On an idle machine that is the wait
    itself; with every core of this machine taken, the 3 MB history read (a 40-60 ms wait on
    an idle machine: a large reply's encoding is one C call holding the interpreter) made
    the probe wait 225-509 ms. A stall of the event loop (a second of CPU for a long
    history) is far over the bound either way."""
    worst = float("inf")
    result: Any = None
    tx = ""
    for _ in range(ATTEMPTS):
        probe = Probe(server)
        tx = setup()

        def guarded(tx: str = tx) -> Any:
            try:
                return call(tx)
            except grpc.RpcError as exc:
                return exc

        before = slowdown()
        started = time.perf_counter()
        result = probe.around(guarded)
        took = time.perf_counter() - started
        assert took < ANSWER_S, f"answered after {took:.1f} s"
        assert not probe.errors, probe.errors
        assert probe.latencies_ms, "the probe made no call"
        waited = max(probe.latencies_ms)
        if waited > DELAY_MS:
            waited /= min(before, slowdown())
        worst = min(worst, waited)
        if worst <= DELAY_MS:
            break
    return result, worst, tx


def assert_not_internal(result: Any) -> None:
    if isinstance(result, grpc.RpcError):
        assert result.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (
            result.code(),
            result.details(),
        )


def history_readable(server: Server, tx: str) -> pb.GetTransactionResponse:
    info = server.stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx), timeout=10)
    page = server.stub.ListSteps(pb.ListStepsRequest(transaction_id=tx), timeout=10)
    assert page.total_steps == len(info.steps)
    return info


def prepared(server: Server, value: Any = "v1") -> str:
    """A transaction whose step 1 wrote ``kv`` key ``k1`` = ``value``."""
    tx = server.begin()
    r = server.step(tx, 1, "kv.put", json.dumps({"key": "k1", "value": value}))
    assert r.status == pb.STEP_STATUS_SUCCESS, r.clean_hint
    return tx


def assert_state_kept(server: Server, tx: str, result: Any, value: Any = "v1") -> None:
    """The transaction is where the failed step's reply says (a reference failure may rewind
    to its producing step: the controller's jump, not damage), every live step before it is
    a success, nothing of the hostile step is live, and, with step 1 kept, kv state is what
    step 1 wrote (read by the next step)."""
    info = history_readable(server, tx)
    assert info.status == "ACTIVE"
    assert info.next_step_id == result.next_step_id
    live = [(s.step_id, s.status) for s in info.steps if s.live]
    assert live == [(i, "SUCCESS") for i in range(1, info.next_step_id)]
    for s in info.steps:
        # Nothing oversized was kept for a failed attempt: at most what was sent.
        assert len(s.arguments_json) <= 1_100_000
    if info.next_step_id == 2:
        got = server.step(tx, 2, "kv.get", json.dumps({"key": "k1"}))
        assert got.status == pb.STEP_STATUS_SUCCESS
        assert json.loads(got.output_json)["value"] == value


# --------------------------------------------------------------- 1. hint cleaning is linear

CLEANER_TEXTS = {
    "java frame run-on (the issue's)": "\nat " + "a" * 65000,
    "indented frame run-on": "\n    at " + "a" * 65000,
    "rust symbol run-on": "\n  0: " + " " * 65000,
    "lookahead window, repeated": "resolved reference: ${step" * 2500,
    "key/value pairs near-missing": "Key (a)=(a) a" * 5000,
    "many short lines": "EACCE\n" * 10000,
}


@pytest.mark.parametrize("name", sorted(CLEANER_TEXTS))
def test_a_hostile_error_text_is_cleaned_fast_and_stalls_no_one(server: Server, name: str) -> None:
    # A reference path is copied into the error text verbatim: the way in with
    # only built-in tools.
    path = CLEANER_TEXTS[name].replace(".", "_").replace("{", "(").replace("}", ")")
    arguments = json.dumps({"key": "k2", "value": "${steps.1." + path + "}"})
    result, worst, tx = hostile(
        server, lambda: prepared(server), lambda tx: server.step(tx, 2, "kv.put", arguments)
    )
    assert_not_internal(result)
    assert result.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert result.clean_hint.startswith("Hint: ")
    assert len(result.clean_hint) <= 240
    assert worst <= DELAY_MS, f"another client waited {worst:.0f} ms"
    assert_state_kept(server, tx, result)


# --------------------------------------------------------------- 2. references and size limits

REFERENCE_BOMBS = {
    # The issue's: 500 copies of a 1 MB value would be 500 MB.
    "array of whole-value references": {"key": "k2", "value": ["${steps.1.value}"] * 500},
    "object of references": {
        "key": "k2",
        "value": {f"f{i}": "${steps.1.value}" for i in range(50)},
    },
    "interpolated into one string": {"key": "k2", "value": "${steps.1.value}" * 50},
    "whole outputs, nested": {"key": "k2", "value": [["${steps.1}"] * 10] * 10},
}


@pytest.mark.parametrize("name", sorted(REFERENCE_BOMBS))
def test_references_cannot_expand_past_the_resolved_arguments_limit(
    server: Server, name: str
) -> None:
    arguments = json.dumps(REFERENCE_BOMBS[name])
    size_before = sum(f.stat().st_size for f in server.data_dir.glob("agenttx.db*"))
    result, worst, tx = hostile(
        server,
        lambda: prepared(server, ONE_MB),
        lambda tx: server.step(tx, 2, "kv.put", arguments),
    )
    assert_not_internal(result)
    assert result.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert "max_resolved_arguments_bytes" in result.clean_hint
    assert worst <= DELAY_MS, f"another client waited {worst:.0f} ms"
    size_after = sum(f.stat().st_size for f in server.data_dir.glob("agenttx.db*"))
    # The failed step's row holds the sent arguments (a few KB), never the expansion (each
    # attempt's set-up wrote its 1 MB value, which counts here too).
    assert size_after - size_before < 8 << 20
    assert_state_kept(server, tx, result, ONE_MB)


def test_too_many_references_are_refused_naming_the_limit(server: Server) -> None:
    arguments = json.dumps({"key": "k2", "value": ["${steps.1.key}"] * 5000})
    result, worst, tx = hostile(
        server, lambda: prepared(server), lambda tx: server.step(tx, 2, "kv.put", arguments)
    )
    assert result.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert "max_references" in result.clean_hint
    assert worst <= DELAY_MS
    assert_state_kept(server, tx, result)


def test_no_oversized_file_or_outbox_line_comes_from_references(server: Server) -> None:
    tx = prepared(server, ONE_MB)
    write = json.dumps({"path": "bomb.txt", "contents": "${steps.1.value}" * 30})
    stage = json.dumps({"channel": "audit", "payload": {"p": ["${steps.1.value}"] * 30}})
    for tool, arguments in (("fs.write", write), ("effect.stage", stage)):
        result = server.step(tx, 2, tool, arguments)
        assert result.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED, tool
        assert "max_resolved_arguments_bytes" in result.clean_hint
    assert not (server.data_dir / "files" / "bomb.txt").exists()
    commit = server.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
    assert commit.committed
    outbox = server.data_dir / "outbox.jsonl"
    lines = outbox.read_text().splitlines() if outbox.exists() else []
    assert all(len(line) < 1 << 20 for line in lines)
    assert not any('"audit"' in line for line in lines)


# --------------------------------------------------------------- 3. one JSON policy, history

MALFORMED = {
    "truncated": '{"key": "k2", "value": [1, 2',
    "byte order mark": '\ufeff{"key": "k2", "value": 1}',
    "lone surrogate in a key": '{"key": "k2", "value": {"\\ud800": 1}}',
    "lone surrogate in a value": '{"key": "k2", "value": "\\udc00"}',
    "reversed surrogate pair": '{"key": "k2", "value": "\\udc00\\ud800"}',
    "1,000-deep nesting": '{"key": "k2", "value": ' + "[" * 1000 + "]" * 1000 + "}",
    "100,000-deep nesting": '{"key": "k2", "value": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "5,000-digit integer": '{"key": "k2", "value": ' + "9" * 5000 + "}",
    "200-digit integer": '{"key": "k2", "value": -' + "9" * 200 + "}",
    "NaN": '{"key": "k2", "value": NaN}',
    "Infinity": '{"key": "k2", "value": -Infinity}',
    "overflowing float": '{"key": "k2", "value": 1e400}',
    "long mantissa float": '{"key": "k2", "value": 1' + "0" * 400 + ".5}",
    "not an object": "[1, 2, 3]",
    "bare string": '"kv"',
    "wide and shallow": '{"key": "k2", "value": ' + json.dumps([[[[{}]]]] * 20000) + "}",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_arguments_are_a_step_failure_and_history_stays_readable(
    server: Server, name: str
) -> None:
    result, worst, tx = hostile(
        server, lambda: prepared(server), lambda tx: server.step(tx, 2, "kv.put", MALFORMED[name])
    )
    assert_not_internal(result)
    if name == "wide and shallow":  # within the policy: an ordinary, large success
        assert result.status == pb.STEP_STATUS_SUCCESS
        return
    assert result.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED, result
    assert result.clean_hint.startswith("Hint: ")
    assert worst <= DELAY_MS, f"another client waited {worst:.0f} ms"
    info = history_readable(server, tx)
    failed = [s for s in info.steps if s.status == "FAILED"]
    assert len(failed) == 1
    # Text the policy refuses is shown as text: a JSON string holding what was sent.
    shown = json.loads(failed[0].arguments_json)
    assert shown == MALFORMED[name] or isinstance(shown, list | str)
    assert_state_kept(server, tx, result)
