"""The gRPC service's status codes, limits and request idempotency, seen from a plain
generated stub: every status code the contract names, every limit, idempotent replay, the
history that outlives a transaction, health, reflection, listing, tools and the event stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import agenttx
from agenttx.wire import agenttx_pb2 as pb

if TYPE_CHECKING:  # imported at run time by pytest_plugins, so that pytest rewrites its asserts
    from served_engine import Served

pytest_plugins = ["served_engine"]  # ``s`` and ``serve``: this test's engine behind a server

MiB = 1 << 20
Code = grpc.StatusCode


async def status_of(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), caught.value.details()


# ---------------------------------------------------------------------------- OK


async def test_a_failed_and_rolled_back_step_is_ok(s: Served) -> None:
    tx = await s.begin()
    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    r = await s.step(tx, 2, "kv.get", {"key": "missing"})
    assert r.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert r.clean_hint.startswith("Hint: ")
    assert r.next_step_id >= 1
    assert r.constraints
    bad_tool = await s.step(tx, r.next_step_id, "no.such_tool", {})
    assert bad_tool.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert "kv.put" in bad_tool.clean_hint or bad_tool.error_category


# ---------------------------------------------------------------------------- limits


async def test_step_limits_are_invalid_argument_and_consume_nothing(s: Served) -> None:
    tx = await s.begin()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"transaction_id": ""}, "transaction_id is required"),
        ({"step_id": 0}, "step_id must be >= 1"),
        ({"tool_name": ""}, "tool_name must be 1-128 bytes"),
        ({"tool_name": "t" * 129}, "tool_name must be 1-128 bytes"),
        ({"arguments_json": json.dumps({"v": "x" * MiB})}, "arguments_json exceeds 1048576"),
        ({"raw_context": "x" * (MiB + 1)}, "raw_context exceeds 1048576"),
        ({"request_id": "r" * 257}, "request_id exceeds 256 bytes"),
    ]
    for override, message in cases:
        fields = {"transaction_id": tx, "step_id": 1, "tool_name": "kv.put", **override}
        code, details = await status_of(s.stub.ExecuteStep(pb.ExecuteStepRequest(**fields)))
        assert (code, message in details) == (Code.INVALID_ARGUMENT, True), (override, details)
    assert (await s.get(tx)).next_step_id == 1
    ok = await s.step(tx, 1, "t" * 128, {})  # 128 bytes is allowed (and an unknown tool)
    assert ok.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED


async def test_begin_limits_are_invalid_argument(s: Served) -> None:
    cases: list[tuple[pb.BeginTransactionRequest, str]] = [
        (pb.BeginTransactionRequest(agent_id="a" * 257), "agent_id exceeds 256 bytes"),
        (
            pb.BeginTransactionRequest(metadata={str(i): "" for i in range(65)}),
            "metadata exceeds 64 entries",
        ),
        (
            pb.BeginTransactionRequest(policy=pb.RollbackPolicy(max_local_depth=17)),
            "max_local_depth must be 0..16",
        ),
        (
            pb.BeginTransactionRequest(policy=pb.RollbackPolicy(max_global_resets=17)),
            "max_global_resets must be 0..16",
        ),
        (
            pb.BeginTransactionRequest(policy=pb.RollbackPolicy(replay_budget_factor=0.05)),
            "replay_budget_factor must be 0.1..1000",
        ),
        (
            pb.BeginTransactionRequest(policy=pb.RollbackPolicy(replay_budget_factor=1000.5)),
            "replay_budget_factor must be 0.1..1000",
        ),
        (pb.BeginTransactionRequest(isolation="chaos"), "unknown isolation"),
    ]
    for request, message in cases:
        code, details = await status_of(s.stub.BeginTransaction(request))
        assert code == Code.INVALID_ARGUMENT, details
        assert message in details
    edge = pb.BeginTransactionRequest(
        agent_id="a" * 256,
        metadata={str(i): "" for i in range(64)},
        policy=pb.RollbackPolicy(
            max_local_depth=16, max_global_resets=0, replay_budget_factor=1000
        ),
    )
    assert (await s.stub.BeginTransaction(edge)).next_step_id == 1


async def test_rollback_to_step_must_be_below_the_next_step(s: Served) -> None:
    tx = await s.begin()
    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    for to_step in (2, 9):
        code, details = await status_of(
            s.stub.RollbackTransaction(
                pb.RollbackTransactionRequest(transaction_id=tx, to_step=to_step)
            )
        )
        assert code == Code.INVALID_ARGUMENT
        assert f"to_step {to_step} must be lower than the next step 2" in details
    rewound = await s.stub.RollbackTransaction(
        pb.RollbackTransactionRequest(transaction_id=tx, to_step=1)
    )
    assert (rewound.rolled_back, rewound.next_step_id) == (True, 1)


async def test_other_empty_ids_and_listing_limits(s: Served) -> None:
    for call in (
        s.stub.CommitTransaction(pb.CommitTransactionRequest()),
        s.stub.RollbackTransaction(pb.RollbackTransactionRequest()),
        s.stub.GetTransaction(pb.GetTransactionRequest()),
        s.stub.ListTransactions(pb.ListTransactionsRequest(page_size=501)),
        s.stub.ListTransactions(pb.ListTransactionsRequest(statuses=["DONE"])),
    ):
        assert (await status_of(call))[0] == Code.INVALID_ARGUMENT


async def test_a_message_over_4_mib_is_refused_by_grpc_itself(s: Served) -> None:
    tx = await s.begin()
    code, details = await status_of(s.step(tx, 1, "kv.put", {}, raw_context="x" * (4 * MiB)))
    assert code == Code.RESOURCE_EXHAUSTED, details
    assert (await s.get(tx)).next_step_id == 1


@agenttx.tool(name="rcpt.wide", effect="state")
async def wide(ctx: agenttx.ToolContext, n: int) -> dict[str, int]:
    for i in range(n):
        await ctx.state.put(f"{i:06d}/" + "k" * 900, i)
    return {"written": n}


@pytest.mark.stores("sqlite")
async def test_a_preview_over_the_message_limit_is_refused_with_what_to_do(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    s = await serve(tools=[wide])
    tx = await s.begin()
    await s.step(tx, 1, "rcpt.wide", {"n": 5000})
    code, _ = await status_of(s.stub.PreviewCommit(pb.PreviewCommitRequest(transaction_id=tx)))
    assert code == Code.FAILED_PRECONDITION
    with pytest.raises(agenttx.FailedPrecondition, match="message limit; split the work"):
        await s.client.preview_commit(tx)
    p = await s.engine.preview_commit(tx)  # the embedded API has no message to fit
    assert len(p.changes.state) == 5000


# ---------------------------------------------------------------------------- NOT_FOUND …


async def test_unknown_transactions_are_not_found(s: Served) -> None:
    for call in (
        s.step("tx_nope", 1, "kv.put", {}),
        s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id="tx_nope")),
        s.stub.RollbackTransaction(pb.RollbackTransactionRequest(transaction_id="tx_nope")),
        s.get("tx_nope"),
    ):
        code, details = await status_of(call)
        assert code == Code.NOT_FOUND
        assert "tx_nope" in details
    stream = s.stub.WatchTransaction(pb.WatchTransactionRequest(transaction_id="tx_nope"))
    assert (await status_of(_drain(stream)))[0] == Code.NOT_FOUND


async def test_wrong_step_and_ended_transactions_are_failed_precondition(s: Served) -> None:
    tx = await s.begin()
    code, details = await status_of(s.step(tx, 5, "kv.put", {"key": "a", "value": 1}))
    assert code == Code.FAILED_PRECONDITION
    assert f"transaction {tx} expects step 1, got step 5; send step_id=1" == details
    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    await s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
    for call, action in (
        (s.step(tx, 2, "kv.put", {"key": "a", "value": 2}), "execute a step"),
        (s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx)), "commit"),
        (s.stub.RollbackTransaction(pb.RollbackTransactionRequest(transaction_id=tx)), "roll back"),
    ):
        code, details = await status_of(call)
        assert code == Code.FAILED_PRECONDITION
        assert details == f"transaction {tx} is COMMITTED; cannot {action}"


async def test_a_commit_conflict_is_aborted(s: Served) -> None:
    first, second = await s.begin(), await s.begin()
    await s.step(first, 1, "kv.put", {"key": "shared", "value": 1})
    await s.step(second, 1, "kv.put", {"key": "shared", "value": 2})
    await s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=first))
    code, details = await status_of(
        s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=second))
    )
    assert code == Code.ABORTED
    assert "conflict on kv/shared" in details
    loser = await s.get(second)
    assert loser.status == "FAILED"
    assert "conflict" in loser.abort_reason


async def test_a_reused_request_id_with_another_payload_already_exists(s: Served) -> None:
    tx = await s.begin(request_id="b-1")
    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="r-1")
    code, details = await status_of(
        s.step(tx, 2, "kv.put", {"key": "a", "value": 2}, request_id="r-1")
    )
    assert code == Code.ALREADY_EXISTS
    assert "different execute_step request" in details
    code, _ = await status_of(
        s.stub.BeginTransaction(pb.BeginTransactionRequest(agent_id="x", request_id="b-1"))
    )
    assert code == Code.ALREADY_EXISTS


async def test_a_deadline_passes_but_the_same_request_id_gets_the_reply(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    runs: list[str] = []

    @agenttx.tool(name="pay.send", effect="irreversible")
    async def send(ctx: agenttx.ToolContext) -> dict[str, int]:
        runs.append("sending")
        await asyncio.sleep(0.3)
        return {"runs": len(runs)}

    s = await serve(tools=[send])
    tx = await s.begin()
    request = pb.ExecuteStepRequest(
        transaction_id=tx, step_id=1, tool_name="pay.send", request_id="pay-1"
    )
    code, _ = await status_of(s.stub.ExecuteStep(request, timeout=0.05))
    assert code == Code.DEADLINE_EXCEEDED
    again = await s.stub.ExecuteStep(request)  # waits for the first run, then replays it
    assert again.status == pb.STEP_STATUS_SUCCESS
    assert json.loads(again.output_json) == {"runs": 1}
    assert runs == ["sending"]


async def test_timeouts_in_tools_undo_handlers_and_channels_hold_over_grpc(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    """Code that binds to the running task — ``asyncio.timeout``, the engine's per-tool
    timeout — in tools, undo handlers and delivery channels must see the task the call runs
    in for its whole life, or a timeout cancels the wrong task (the RPC's) and the code runs
    on unbounded."""
    undone: list[str] = []

    @agenttx.tool(name="slow.call", effect="compensatable", timeout=0.2, idempotent=True)
    async def slow_call(ctx: agenttx.ToolContext) -> dict[str, str]:
        await asyncio.sleep(5)  # the engine's 0.2 s timeout must stop this
        return {}

    @agenttx.tool(name="inner.timeout", effect="compensatable")
    async def inner_timeout(ctx: agenttx.ToolContext) -> dict[str, bool]:
        await ctx.register_undo({})
        try:
            async with asyncio.timeout(0.05):  # entered before the first suspension
                await asyncio.sleep(5)
        except TimeoutError:
            return {"timed_out": True}
        return {"timed_out": False}

    @inner_timeout.undo
    async def undo_inner(ctx: agenttx.ToolContext) -> None:
        try:
            async with asyncio.timeout(0.05):  # the undo's own bound, before any suspension
                await asyncio.sleep(5)
        except TimeoutError:
            undone.append("inner")

    class TimingChannel:
        async def deliver(self, effect: Any) -> None:
            try:
                async with asyncio.timeout(0.05):  # entered before the first suspension
                    await asyncio.sleep(5)
            except TimeoutError:
                undone.append("channel timed out")

    s = await serve(tools=[slow_call, inner_timeout], channels={"mail": TimingChannel()})
    mail = await s.begin()
    await s.stub.ExecuteStep(
        pb.ExecuteStepRequest(
            transaction_id=mail,
            step_id=1,
            tool_name="effect.stage",
            arguments_json=json.dumps({"channel": "mail", "payload": {}}),
        ),
        timeout=10,  # a regression hangs the call: fail instead
    )
    c = await s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=mail), timeout=10)
    assert c.effects_dispatched == 1
    assert undone == ["channel timed out"]
    undone.clear()
    tx = await s.begin()
    r = await s.stub.ExecuteStep(
        pb.ExecuteStepRequest(transaction_id=tx, step_id=1, tool_name="inner.timeout"),
        timeout=10,
    )
    assert json.loads(r.output_json) == {"timed_out": True}
    started = asyncio.get_running_loop().time()
    r = await s.stub.ExecuteStep(
        pb.ExecuteStepRequest(transaction_id=tx, step_id=2, tool_name="slow.call"),
        timeout=10,
    )
    assert asyncio.get_running_loop().time() - started < 2
    assert r.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert r.error_category == "timeout", r
    rb = await s.stub.RollbackTransaction(
        pb.RollbackTransactionRequest(transaction_id=tx), timeout=10
    )
    assert rb.rolled_back
    assert list(rb.compensation_errors) == []
    assert undone == ["inner"]


async def test_an_unexpected_error_is_internal_and_says_nothing_more(
    s: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(tx_id: str) -> None:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(s.engine, "get_transaction", broken)
    code, details = await status_of(s.get("tx_any"))
    assert code == Code.INTERNAL
    assert "secret" not in details
    assert "server log" in details


# ---------------------------------------------------------------------------- idempotency


async def test_execute_step_replays_the_same_reply_and_runs_once(s: Served) -> None:
    tx = await s.begin()
    first = await s.step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="same")
    again = await s.step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="same")
    assert again == first
    failed = await s.step(tx, 2, "kv.get", {"key": "missing"}, request_id="fails")
    assert await s.step(tx, 2, "kv.get", {"key": "missing"}, request_id="fails") == failed
    info = await s.get(tx)
    assert [(r.step_id, r.attempt) for r in info.steps if r.step_id == 1] == [(1, 1)]
    assert [r.status for r in info.steps if r.step_id == 2] == ["FAILED"]


async def test_begin_commit_and_rollback_replay_too(s: Served) -> None:
    b = pb.BeginTransactionRequest(agent_id="a", request_id="b")
    tx = (await s.stub.BeginTransaction(b)).transaction_id
    assert (await s.stub.BeginTransaction(b)).transaction_id == tx
    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    c = pb.CommitTransactionRequest(transaction_id=tx, request_id="c")
    assert await s.stub.CommitTransaction(c) == await s.stub.CommitTransaction(c)
    other = await s.begin()
    r = pb.RollbackTransactionRequest(transaction_id=other, request_id="r")
    assert await s.stub.RollbackTransaction(r) == await s.stub.RollbackTransaction(r)


# ---------------------------------------------------------------------------- reads


async def test_ended_transactions_stay_readable(s: Served) -> None:
    tx = await s.begin(agent_id="history")
    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1}, raw_context="because")
    await s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
    info = await s.get(tx)
    assert (info.status, info.agent_id, info.next_step_id) == ("COMMITTED", "history", 0)
    assert [(c.step_id, c.raw_context) for c in info.context] == [(1, "because")]
    assert json.loads(info.steps[0].output_json) == {"key": "a", "value": 1}
    aborted = await s.begin()
    await s.stub.RollbackTransaction(pb.RollbackTransactionRequest(transaction_id=aborted))
    assert (await s.get(aborted)).status == "ROLLED_BACK"


async def test_health_reports_serving(s: Served) -> None:
    health = health_pb2_grpc.HealthStub(s.channel)
    for service in ("", "agenttx.v1.AgentTxService"):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_service(s: Served) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(s.channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    names: list[str] = []
    async for reply in stub.ServerReflectionInfo(iter([request])):
        names += [service.name for service in reply.list_services_response.service]
    assert "agenttx.v1.AgentTxService" in names
    assert "grpc.health.v1.Health" in names


async def test_list_transactions_filters_and_pages(s: Served) -> None:
    mine = [await s.begin(agent_id="me", labels=["nightly"]) for _ in range(3)]
    await s.begin(agent_id="someone-else", labels=["nightly"])
    await s.begin(agent_id="me")
    await s.stub.RollbackTransaction(pb.RollbackTransactionRequest(transaction_id=mine[0]))

    async def listing(**fields: Any) -> list[str]:
        ids: list[str] = []
        token = ""
        while True:
            page = await s.stub.ListTransactions(
                pb.ListTransactionsRequest(page_token=token, **fields)
            )
            ids += [t.transaction_id for t in page.transactions]
            assert len(page.transactions) <= fields.get("page_size", 50)
            token = page.next_page_token
            if not token:
                return ids

    assert await listing(agent_id="me", label="nightly", page_size=1) == mine  # oldest first
    assert await listing(agent_id="me", label="nightly", statuses=["ACTIVE"]) == mine[1:]
    assert await listing(statuses=["ROLLED_BACK"]) == [mine[0]]
    assert len(await listing(page_size=2)) == 5
    page = await s.stub.ListTransactions(pb.ListTransactionsRequest(agent_id="me", label="nightly"))
    summary = {t.transaction_id: t for t in page.transactions}[mine[0]]
    assert (summary.status, list(summary.labels)) == ("ROLLED_BACK", ["nightly"])


async def test_list_tools_has_schemas(s: Served) -> None:
    tools = {t.name: t for t in (await s.stub.ListTools(pb.ListToolsRequest())).tools}
    assert {"kv.put", "kv.get", "kv.delete", "record.insert", "record.get", "fs.write"} <= set(
        tools
    )
    put = tools["kv.put"]
    schema = json.loads(put.input_schema_json)
    assert schema["type"] == "object"
    assert {"key", "value"} <= set(schema["properties"])
    assert isinstance(json.loads(put.examples_json), list)
    assert put.effect == "state"
    assert put.timeout_ms > 0
    assert tools["effect.stage"].effect == "staged"


async def test_watch_streams_events_until_commit(s: Served) -> None:
    tx = await s.begin()
    events: list[Any] = []
    first = asyncio.Event()
    stream = s.stub.WatchTransaction(pb.WatchTransactionRequest(transaction_id=tx))

    async def collect() -> None:
        async for e in stream:
            events.append(e)
            first.set()

    watching = asyncio.create_task(collect())
    await asyncio.wait_for(first.wait(), 30)
    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    await s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
    await asyncio.wait_for(watching, 30)
    assert events[0].status == "ACTIVE"
    assert events[0].revision == 1
    assert (events[-1].status, events[-1].kind, events[-1].next_step_id) == (
        "COMMITTED",
        "commit",
        0,
    )
    revisions = [e.revision for e in events]
    assert revisions == sorted(set(revisions))


async def test_watching_an_ended_transaction_sends_its_final_state(s: Served) -> None:
    tx = await s.begin()
    await s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
    stream = s.stub.WatchTransaction(pb.WatchTransactionRequest(transaction_id=tx))
    events = [e async for e in stream]
    assert [e.status for e in events] == ["COMMITTED"]


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass
