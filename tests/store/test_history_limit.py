"""A history larger than the 4 MiB message limit: GetTransaction answers with a reply trimmed to
fit (the reference's fields kept, large texts elided with a marker that says so and where to
read them), ListSteps reads the whole history page by page, and our client and ``agenttx tx
show`` put the pages back together."""

from __future__ import annotations

import asyncio
import json
import random
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from click.testing import CliRunner

import agenttx
from agenttx.api import history
from agenttx.cli import main
from agenttx.client import AgentTxClient, AsyncAgentTxClient
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc

if TYPE_CHECKING:  # imported at run time by pytest_plugins, so that pytest rewrites its asserts
    from reference_client import ReferenceClient

# The session's reference client, generated once; ``target``, this test's engine behind a server.
pytest_plugins = ["reference_client", "served_engine"]

LIMIT = 4 * 1024 * 1024
VALUE_BYTES = 700 * 1024  # each kv.put carries it in its arguments and again in its output


def _value(i: int) -> str:
    return f"{i:02d}" * (VALUE_BYTES // 2)


async def _big_history(engine: agenttx.Engine, steps: int, reasoning_bytes: int = 64) -> str:
    """A committed-free open transaction: ``steps`` kv.puts of ~700 KiB, one failed step in
    the middle (so the history has an attempt that is not live) and the reasoning given."""
    tx = (await engine.begin(agent_id="big", metadata={"goal": "fill the history"})).transaction_id
    step = 1
    for i in range(1, steps + 1):
        if i == 3:
            failed = await engine.execute_step(tx, step, "kv.put", "{}", "r" * reasoning_bytes)
            assert failed.next_step_id == step
        arguments = json.dumps({"key": f"k{i}", "value": _value(i)})
        r = await engine.execute_step(tx, step, "kv.put", arguments, f"{i}" * reasoning_bytes)
        step = r.next_step_id
    return tx


async def _get(target: str, tx: str) -> pb.GetTransactionResponse:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        reply: pb.GetTransactionResponse = await stub.GetTransaction(
            pb.GetTransactionRequest(transaction_id=tx), timeout=30
        )
        return reply


async def _pages(target: str, tx: str, page_size: int = 0) -> list[pb.ListStepsResponse]:
    pages: list[pb.ListStepsResponse] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        token = ""
        while True:
            page = await stub.ListSteps(
                pb.ListStepsRequest(transaction_id=tx, page_token=token, page_size=page_size),
                timeout=30,
            )
            pages.append(page)
            token = page.next_page_token
            if not token:
                return pages


async def test_get_transaction_over_the_limit_answers_with_a_trimmed_reply(
    engine: agenttx.Engine, target: str
) -> None:
    tx = await _big_history(engine, 8)  # ~11 MiB of arguments and outputs
    full = await engine.get_transaction(tx)

    reply = await _get(target, tx)  # no RESOURCE_EXHAUSTED

    assert reply.ByteSize() <= LIMIT
    assert reply.history_trimmed
    # The reference's fields are all there and whole.
    assert (reply.transaction_id, reply.status, reply.agent_id) == (tx, "ACTIVE", "big")
    assert reply.next_step_id == full.next_step_id == 9
    assert list(reply.constraints) == full.constraints
    assert reply.global_resets == 0
    assert [(c.step_id, c.tool_name, c.raw_context) for c in reply.context] == [
        (c.step_id, c.tool_name, c.raw_context) for c in full.context
    ]
    assert dict(reply.metadata) == {"goal": "fill the history"}
    # Every record is there; the large texts that had to go say so and where to read them.
    assert reply.steps_omitted == 0
    assert [(s.step_id, s.attempt, s.status) for s in reply.steps] == [
        (s.step_id, s.attempt, s.status) for s in full.steps
    ]
    elided = [(s, name) for s in reply.steps for name in s.elided]
    assert elided
    for record, name in elided:
        text = json.loads(getattr(record, name))  # still JSON: a string
        assert isinstance(text, str)
        assert text.startswith(f"[elided by agenttx: {name} of ")
        assert "ListSteps" in text
    # Only what had to go went: the reply is still mostly history.
    assert reply.ByteSize() > LIMIT - VALUE_BYTES * 3
    kept = [s for s in reply.steps if not s.elided and s.status == "SUCCESS"]
    assert kept
    for record in kept:
        view = next(
            v for v in full.steps if (v.step_id, v.attempt) == (record.step_id, record.attempt)
        )
        assert json.loads(record.output_json) == view.output


async def test_list_steps_reads_the_whole_history_in_messages_under_the_limit(
    engine: agenttx.Engine, target: str
) -> None:
    tx = await _big_history(engine, 8, reasoning_bytes=300 * 1024)
    full = await engine.get_transaction(tx)

    pages = await _pages(target, tx)

    assert len(pages) > 1
    assert all(p.ByteSize() <= LIMIT for p in pages)
    assert all(p.total_steps == len(full.steps) for p in pages)
    records = [s for p in pages for s in p.steps]
    assert not [s for s in records if s.elided]
    assert [(s.step_id, s.attempt, s.live, s.status) for s in records] == [
        (s.step_id, s.attempt, s.live, s.status) for s in full.steps
    ]
    assert [json.loads(s.arguments_json) for s in records] == [s.arguments for s in full.steps]
    assert [json.loads(s.output_json) if s.output_json else None for s in records] == [
        s.output for s in full.steps
    ]
    context = [(c.step_id, c.tool_name, c.raw_context) for p in pages for c in p.context]
    assert context == [(c.step_id, c.tool_name, c.raw_context) for c in full.context]


async def test_list_steps_pages_by_count_too(engine: agenttx.Engine, target: str) -> None:
    tx = (await engine.begin()).transaction_id
    for i in range(1, 8):
        await engine.execute_step(tx, i, "kv.put", json.dumps({"key": f"k{i}", "value": i}))
    pages = await _pages(target, tx, page_size=3)
    assert [[s.step_id for s in p.steps] for p in pages] == [[1, 2, 3], [4, 5, 6], [7]]
    assert [p.next_page_token != "" for p in pages] == [True, True, False]
    assert [c.step_id for p in pages for c in p.context] == list(range(1, 8))


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"page_token": "abc"}, "page_token"),
        ({"page_token": "-1"}, "page_token"),
        ({"page_size": 501}, "page_size must be 1..500"),
    ],
)
async def test_list_steps_refuses_bad_paging(
    engine: agenttx.Engine, target: str, request_fields: dict[str, Any], message: str
) -> None:
    tx = (await engine.begin()).transaction_id
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.AgentTxServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ListSteps(pb.ListStepsRequest(transaction_id=tx, **request_fields))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in (refused.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.ListSteps(pb.ListStepsRequest(transaction_id="tx_missing"))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_reasoning_log_over_the_limit_is_elided_in_the_reference_context(
    engine: agenttx.Engine, target: str
) -> None:
    # Eight reasonings of 900 KiB: the reference's own `context` field cannot fit whole.
    tx = (await engine.begin()).transaction_id
    for i in range(1, 9):
        await engine.execute_step(
            tx, i, "kv.put", json.dumps({"key": f"k{i}", "value": i}), f"{i}" * (900 * 1024)
        )
    full = await engine.get_transaction(tx)

    reply = await _get(target, tx)

    assert reply.ByteSize() <= LIMIT
    assert reply.history_trimmed
    assert [c.step_id for c in reply.context] == [c.step_id for c in full.context]
    elided = [c for c in reply.context if c.raw_context_elided]
    whole = [c for c in reply.context if not c.raw_context_elided]
    assert elided
    assert whole
    assert all(c.raw_context.startswith("[elided by agenttx: raw_context of ") for c in elided)
    assert all("ListSteps" in c.raw_context for c in elided)
    by_step = {c.step_id: c.raw_context for c in full.context}
    assert all(c.raw_context == by_step[c.step_id] for c in whole)
    # The small step records still fit beside it.
    assert len(reply.steps) == 8
    assert not [s for s in reply.steps if s.elided]

    pages = await _pages(target, tx)
    assert [c.raw_context for p in pages for c in p.context] == [
        c.raw_context for c in full.context
    ]


async def test_our_clients_read_a_trimmed_history_whole(
    engine: agenttx.Engine, target: str
) -> None:
    tx = await _big_history(engine, 8)
    full = await engine.get_transaction(tx)

    async with AsyncAgentTxClient(target, timeout=30) as client:
        info = await client.get_transaction(tx)
        streamed = [s async for s in client.iter_steps(tx, page_size=2)]
        first = await client.list_steps(tx, page_size=2)
    assert info.steps == full.steps
    assert info.context == full.context
    assert (info.transaction_id, info.next_step_id, info.constraints) == (
        tx,
        full.next_step_id,
        full.constraints,
    )
    assert streamed == full.steps
    assert first.steps == full.steps[:2]
    assert first.total_steps == len(full.steps)
    assert first.next_page_token

    def sync_read() -> tuple[Any, Any]:
        with AgentTxClient(target, timeout=30) as c:
            return c.get_transaction(tx), list(c.iter_steps(tx))

    info, streamed = await asyncio.to_thread(sync_read)
    assert info.steps == full.steps
    assert streamed == full.steps


async def test_tx_show_prints_the_whole_history(engine: agenttx.Engine, target: str) -> None:
    tx = await _big_history(engine, 8)
    full = await engine.get_transaction(tx)

    def show() -> Any:
        return CliRunner().invoke(main, ["tx", "show", tx, "--json", "--server", target])

    result = await asyncio.to_thread(show)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert [s["output"] for s in shown["steps"]] == [s.output for s in full.steps]
    assert [s["elided"] for s in shown["steps"]] == [[]] * len(full.steps)
    assert shown["history_trimmed"] is False  # what it prints is whole
    assert len(shown["context"]) == len(full.context)


async def test_a_reference_client_reads_a_trimmed_history(
    engine: agenttx.Engine, target: str, reference_client: ReferenceClient
) -> None:
    tx = await _big_history(engine, 8)
    full = await engine.get_transaction(tx)
    seen = await reference_client.run(REFERENCE_GET, target, tx)
    assert seen["status"] == ["OK", ""]
    assert seen["reply"]["next_step_id"] == 9
    assert seen["reply"]["agent_id"] == "big"
    assert seen["reply"]["context"] == [
        [c.step_id, c.tool_name, c.raw_context] for c in full.context
    ]


# The reference client (reference_client.py) reads the transaction named by its extra string.
REFERENCE_GET = r"""
tx = args[0]
seen = {"status": ["OK", ""], "reply": None}
try:
    g = stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx), timeout=30)
    seen["reply"] = {"next_step_id": g.next_step_id, "agent_id": g.agent_id,
                     "context": [[e.step_id, e.tool_name, e.raw_context] for e in g.context]}
except grpc.RpcError as exc:
    seen["status"] = [exc.code().name, exc.details()]
"""


# -- the fitting itself, on messages built here (any shape, any limit) -------------------------


def _synthetic(rng: random.Random, records: int) -> pb.GetTransactionResponse:
    def text(n: int) -> str:
        return "x" * n

    reply = pb.GetTransactionResponse(
        transaction_id="tx_synthetic", status="ACTIVE", next_step_id=records + 1, agent_id="a"
    )
    reply.constraints.extend([f"Hint: rule {i}" for i in range(rng.randint(0, 5))])
    for i in range(1, records + 1):
        reply.context.add(step_id=i, tool_name="t", raw_context=text(rng.choice([0, 50, 3000])))
        reply.edges.add(from_step=max(i - 1, 1), to_step=i, key="id")
        reply.steps.add(
            step_id=i,
            attempt=1,
            tool_name="t",
            status="SUCCESS",
            live=True,
            arguments_json=json.dumps(text(rng.choice([10, 400, 5000]))),
            output_json=json.dumps(text(rng.choice([10, 800, 20000]))),
        )
    return reply


@pytest.mark.parametrize("seed", range(12))
def test_a_fitted_reply_is_never_over_the_limit_and_keeps_a_prefix(seed: int) -> None:
    rng = random.Random(seed)
    reply = _synthetic(rng, rng.randint(20, 200))
    original = pb.GetTransactionResponse()
    original.CopyFrom(reply)
    limit = rng.randint(3_000, max(3_001, original.ByteSize()))

    history.fit_transaction(reply, limit)

    assert reply.ByteSize() <= limit
    assert reply.history_trimmed == (original.ByteSize() > limit)
    # What stays is a prefix of the original records, each whole or with texts elided.
    assert len(reply.steps) + reply.steps_omitted == len(original.steps)
    for kept, was in zip(reply.steps, original.steps, strict=False):
        assert (kept.step_id, kept.attempt) == (was.step_id, was.attempt)
        for name in ("arguments_json", "output_json"):
            if name in kept.elided:
                assert "ListSteps" in json.loads(getattr(kept, name))
            else:
                assert getattr(kept, name) == getattr(was, name)
    if reply.steps_omitted:
        assert history.page_offset(reply.steps_page_token) == len(reply.steps)
    else:
        assert reply.steps_page_token == ""
    assert reply.transaction_id == original.transaction_id
    assert list(reply.constraints) == list(original.constraints)


def test_records_are_left_out_only_when_eliding_is_not_enough() -> None:
    reply = _synthetic(random.Random(1), 400)
    for s in reply.steps:
        s.arguments_json = s.output_json = '"small"'
    for c in reply.context:
        c.raw_context = ""
    history.fit_transaction(reply, 8_000)
    assert reply.ByteSize() <= 8_000
    assert reply.steps_omitted > 0
    assert len(reply.steps) + reply.steps_omitted == 400
    assert not [s for s in reply.steps if s.elided]  # nothing was big enough to elide
    assert len(reply.context) == 400  # the reference's field came first


def test_a_reply_under_the_limit_is_left_alone() -> None:
    reply = _synthetic(random.Random(2), 10)
    before = reply.SerializeToString()
    history.fit_transaction(reply, reply.ByteSize())
    assert reply.SerializeToString() == before
    assert not reply.history_trimmed


def test_a_page_ends_before_the_limit_and_a_record_too_large_alone_is_elided() -> None:
    records = [
        pb.StepRecord(step_id=i, attempt=1, status="SUCCESS", live=True, output_json=json.dumps(t))
        for i, t in enumerate(["a" * 900, "b" * 5_000, "c" * 900, "d" * 900], start=1)
    ]
    pages: list[pb.ListStepsResponse] = []
    start = 0
    while start < len(records):
        page = pb.ListStepsResponse(total_steps=len(records))
        start += history.fill_page(page, ((r, None) for r in records[start:]), 50, limit=2_000)
        pages.append(page)

    assert all(p.ByteSize() <= 2_000 for p in pages)
    # Record 2 alone is over the limit: it opens a page, elided; record 3 still fits beside it.
    assert [[s.step_id for s in p.steps] for p in pages] == [[1], [2, 3], [4]]
    alone = pages[1].steps[0]
    assert list(alone.elided) == ["output_json"]
    assert "no reply can carry this step whole" in json.loads(alone.output_json)
    others = [s for p in pages for s in p.steps if s.step_id != 2]
    assert [s.output_json for s in others] == [r.output_json for r in records if r.step_id != 2]
    assert not [s for s in others if s.elided]
