"""Prometheus metrics: what a scrape of ``/metrics`` shows after real transactions."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agenttx.api.metrics import Metrics
from agenttx.core.events import event_for
from agenttx.types import TxStatus
from agenttx.wire import agenttx_pb2 as pb
from server_process import ServerProcess, start_server

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Any]]:
    """A server that ran: one commit, one failed-and-rewound step, one manual rewind, one
    abort whose compensation failed, one NOT_FOUND."""
    data_dir = tmp_path_factory.mktemp("metrics") / "data"
    server = start_server(data_dir, "--compensation-retries", "1")
    replies: dict[str, Any] = {}
    with server.killed_on_error(), server.channel() as channel:
        stub = server.stub(channel)

        def begin() -> str:
            return str(stub.BeginTransaction(pb.BeginTransactionRequest()).transaction_id)

        def step(tx: str, n: int, tool: str, args: str) -> Any:
            return stub.ExecuteStep(
                pb.ExecuteStepRequest(
                    transaction_id=tx, step_id=n, tool_name=tool, arguments_json=args
                )
            )

        committed = begin()
        step(committed, 1, "kv.put", '{"key":"a","value":1}')
        step(committed, 2, "effect.stage", '{"channel":"email","payload":{"to":"x"}}')
        replies["commit"] = stub.CommitTransaction(
            pb.CommitTransactionRequest(transaction_id=committed)
        )

        rewound = begin()
        step(rewound, 1, "kv.put", '{"key":"b"}')
        replies["failed_step"] = step(rewound, 2, "kv.get", '{"key":"missing"}')

        kept_open = begin()
        step(kept_open, 1, "kv.put", '{"key":"c"}')
        step(kept_open, 2, "kv.put", '{"key":"d"}')
        manual = pb.RollbackTransactionRequest(transaction_id=kept_open, to_step=2)
        replies["manual"] = stub.RollbackTransaction(manual)

        aborted = begin()
        step(aborted, 1, "test.call_api", '{"order":"o-1"}')
        replies["abort"] = stub.RollbackTransaction(
            pb.RollbackTransactionRequest(transaction_id=aborted, reason="user cancelled")
        )

        with pytest.raises(Exception, match="NOT_FOUND"):
            stub.GetTransaction(pb.GetTransactionRequest(transaction_id="tx_missing"))
    yield server, replies
    assert server.terminate() == 0, server.log_text()


def test_transactions_are_counted_by_final_status(traffic: tuple[ServerProcess, Any]) -> None:
    server, _ = traffic
    samples = scrape(server.metrics_url)
    assert value(samples, "agenttx_transactions_total", status="COMMITTED") == 1
    assert value(samples, "agenttx_transactions_total", status="ROLLED_BACK") == 1
    assert value(samples, "agenttx_transactions_total", status="FAILED") == 0


def test_steps_are_counted_by_status_and_strategy(traffic: tuple[ServerProcess, Any]) -> None:
    server, replies = traffic
    samples = scrape(server.metrics_url)
    failed = replies["failed_step"]
    failed_status = pb.StepStatus.Name(failed.status).removeprefix("STEP_STATUS_")
    strategy = pb.RollbackStrategy.Name(failed.strategy).removeprefix("ROLLBACK_STRATEGY_")
    assert failed_status == "ROLLBACK_TRIGGERED"
    assert value(samples, "agenttx_steps_total", status="SUCCESS", strategy="NONE") == 6
    assert value(samples, "agenttx_steps_total", status=failed_status, strategy=strategy) == 1
    assert value(samples, "agenttx_step_duration_seconds_count") == 7


def test_rollback_and_commit_latency_histograms(traffic: tuple[ServerProcess, Any]) -> None:
    server, replies = traffic
    samples = scrape(server.metrics_url)
    failed = replies["failed_step"]
    strategy = pb.RollbackStrategy.Name(failed.strategy).removeprefix("ROLLBACK_STRATEGY_")
    assert value(samples, "agenttx_rollback_latency_seconds_count", strategy=strategy) == 1
    recorded = value(samples, "agenttx_rollback_latency_seconds_sum", strategy=strategy)
    assert recorded == pytest.approx(failed.rollback_latency_ms / 1000)
    assert value(samples, "agenttx_rollback_latency_seconds_count", strategy="MANUAL") == 1
    assert value(samples, "agenttx_rollback_latency_seconds_count", strategy="ABORT") == 1
    assert value(samples, "agenttx_commit_latency_seconds_count", outcome="committed") == 1
    assert value(samples, "agenttx_commit_latency_seconds_sum", outcome="committed") > 0
    # Cumulative buckets: +Inf holds every observation.
    assert (
        value(samples, "agenttx_commit_latency_seconds_bucket", outcome="committed", le="+Inf") == 1
    )


def test_compensation_failures_and_outbox_gauges(traffic: tuple[ServerProcess, Any]) -> None:
    server, replies = traffic
    samples = scrape(server.metrics_url)
    assert len(replies["abort"].compensation_errors) == 1
    assert value(samples, "agenttx_compensation_failures_total", source="rollback") == 1
    assert replies["commit"].effects_dispatched == 1
    # The one effect went out at commit: nothing waits, nothing is dead.
    assert ("agenttx_outbox_depth", frozenset()) in samples
    assert value(samples, "agenttx_outbox_depth") == 0
    assert value(samples, "agenttx_outbox_dead_letters") == 0


def test_calls_are_counted_by_method_and_code(traffic: tuple[ServerProcess, Any]) -> None:
    server, _ = traffic
    samples = scrape(server.metrics_url)
    assert value(samples, "agenttx_rpc_total", method="BeginTransaction", code="OK") == 4
    assert value(samples, "agenttx_rpc_total", method="GetTransaction", code="NOT_FOUND") == 1
    assert value(samples, "agenttx_build_info", version="0.1.0") == 1
    names = {name for name, _ in samples}
    assert all(n.startswith("agenttx_") for n in names)  # nothing from the global registry


# -- the Metrics object alone ---------------------------------------------------------------


def test_only_final_statuses_count_as_finished_transactions() -> None:
    metrics = Metrics("test")
    for status in (TxStatus.ACTIVE, TxStatus.ROLLING_BACK, TxStatus.FAILED, TxStatus.COMMITTED):
        metrics.on_event(event_for("tx_1", 2, status, 0, 0.0))
    text = metrics.exposition().decode()
    assert 'agenttx_transactions_total{status="FAILED"} 1.0' in text
    assert 'agenttx_transactions_total{status="COMMITTED"} 1.0' in text
    assert 'status="ACTIVE"' not in text


class _OutboxStore:
    async def outbox_counts(self) -> dict[str, int]:
        return {"pending": 2, "delivering": 1, "delivered": 40, "dead": 4}


async def test_outbox_depth_is_pending_plus_delivering() -> None:
    metrics = Metrics("test")
    await metrics.refresh_outbox(_OutboxStore())  # type: ignore[arg-type]
    text = metrics.exposition().decode()
    assert "agenttx_outbox_depth 3.0" in text
    assert "agenttx_outbox_dead_letters 4.0" in text


def test_two_metrics_objects_do_not_share_a_registry() -> None:
    a, b = Metrics("a"), Metrics("b")
    a.on_event(event_for("tx_1", 2, TxStatus.COMMITTED, 0, 0.0))
    assert b'status="COMMITTED"' in a.exposition()
    assert b'status="COMMITTED"' not in b.exposition()


async def test_outbox_gauges_follow_the_store_until_stopped() -> None:
    metrics = Metrics("test")
    store = _OutboxStore()
    stop = asyncio.Event()
    watcher = asyncio.create_task(metrics.watch_outbox(store, stop, interval=0.01))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert b"agenttx_outbox_depth 3.0" in metrics.exposition()
    stop.set()
    await asyncio.wait_for(watcher, 1)
