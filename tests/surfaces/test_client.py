"""The client SDK against a real gRPC server: typed results, the transaction helper (commit on
a clean exit, abort on an exception, rollbacks the agent loop catches and resumes from), the
async twin, error mapping, and retries that resend the same request_id.

The server is ``server_process.ServerThread``: its own event loop in a thread, so the
blocking client can call it from the test's thread.
"""

from __future__ import annotations

import ast
import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

import agenttx
from agenttx import (
    BeginResult,
    CommitResult,
    RollbackResult,
    StepResult,
    StepStatus,
    Strategy,
    TransactionInfo,
    TxStatus,
)
from agenttx.client import (
    AgentTxClient,
    AsyncAgentTxClient,
    AsyncTransaction,
    OutcomeUnknown,
    RetryPolicy,
    RollbackTriggered,
    ServerUnavailable,
    ToolInfo,
    Transaction,
    TransactionAborted,
    TransactionEvent,
    TransactionListPage,
    error_from_status,
)
from agenttx.error_details import to_metadata
from server_process import ServerThread, free_port

FAST_RETRY = RetryPolicy(max_attempts=4, initial_backoff_s=0.01, max_backoff_s=0.05)
CALLS: dict[str, int] = {}  # test.count's calls, by key


@agenttx.tool(name="test.count", effect="read")
async def count(ctx: agenttx.ToolContext, key: str) -> dict[str, int]:
    CALLS[key] = CALLS.get(key, 0) + 1
    return {"calls": CALLS[key]}


@agenttx.tool(name="test.fatal", effect="read")
async def fatal(ctx: agenttx.ToolContext) -> None:
    raise agenttx.FatalToolError("card reported stolen")


@agenttx.tool(name="test.uncertain", effect="irreversible")
async def uncertain(ctx: agenttx.ToolContext) -> None:
    raise agenttx.UncertainOutcome("gateway timed out after sending")


TOOLS = [count, fatal, uncertain]


def client_server(tmp_path: Path, url: str, port: int = 0) -> ServerThread:
    """A server with this module's tools on the store at ``url`` (not started)."""
    return ServerThread(tmp_path, port, tools=TOOLS, url=url)


@pytest.fixture
def server(tmp_path: Path, store_url: str) -> Iterator[ServerThread]:
    CALLS.clear()  # test.count counts per test: each store's run starts from zero
    s = client_server(tmp_path, store_url).start()
    yield s
    s.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[AgentTxClient]:
    with AgentTxClient(server.target, retry=FAST_RETRY, timeout=10) as c:
        yield c


def customer_plan(step: int, learned: bool) -> tuple[str, dict[str, Any]]:
    """The root-cause scenario: step 2 stores a customer id that step 4 needs to exist."""
    return {
        1: ("record.insert", {"table": "customers", "id": "c-1"}),
        2: ("kv.put", {"key": "session/customer", "value": "c-1" if learned else "c-404"}),
        3: ("fs.write", {"path": "drafts/${steps.2.value}.json", "contents": "{}"}),
        4: (
            "record.insert",
            {
                "table": "invoices",
                "id": "i-1",
                "fields": {"customer": "${steps.2.value}"},
                "references": {"customer": "customers"},
            },
        ),
        5: ("effect.stage", {"channel": "email", "payload": {"to": "c-1"}}),
    }[step]


# ---------------------------------------------------------------------------- typed results


def test_every_rpc_returns_typed_results(client: AgentTxClient) -> None:
    begun = client.begin(agent_id="typed", metadata={"team": "a"}, labels=["nightly"])
    assert isinstance(begun, BeginResult)
    assert begun.next_step_id == 1
    assert begun.transaction_status is TxStatus.ACTIVE
    tx = begun.transaction_id

    step = client.execute_step(tx, 1, "kv.put", {"key": "k", "value": [1, 2]}, "why: test")
    assert isinstance(step, StepResult)
    assert step.status is StepStatus.SUCCESS
    assert step.output == {"key": "k", "value": [1, 2]}
    assert (step.step_id, step.next_step_id, step.strategy) == (1, 2, Strategy.NONE)

    info = client.get_transaction(tx)
    assert isinstance(info, TransactionInfo)
    assert (info.status, info.agent_id, info.metadata) == (TxStatus.ACTIVE, "typed", {"team": "a"})
    assert info.policy == agenttx.RollbackPolicy()
    assert info.context == [agenttx.ContextEntry(1, "kv.put", "why: test")]
    assert info.steps[0].arguments == {"key": "k", "value": [1, 2]}
    assert info.steps[0].live

    page = client.list_transactions(label="nightly")
    assert isinstance(page, TransactionListPage)
    assert [t.transaction_id for t in page.transactions] == [tx]
    assert page.transactions[0].labels == ["nightly"]

    tools = {t.name: t for t in client.list_tools()}
    assert isinstance(tools["kv.put"], ToolInfo)
    assert "key" in tools["kv.put"].input_schema["properties"]
    assert tools["kv.put"].effect == "state"

    committed = client.commit(tx)
    assert isinstance(committed, CommitResult)
    assert (committed.committed, committed.steps_committed) == (True, 1)
    assert committed.transaction_status is TxStatus.COMMITTED

    other = client.begin().transaction_id
    aborted = client.rollback(other, reason="not needed")
    assert isinstance(aborted, RollbackResult)
    assert (aborted.rolled_back, aborted.next_step_id) == (True, 0)
    assert aborted.transaction_status is TxStatus.ROLLED_BACK
    assert client.health() == "SERVING"


def test_a_policy_is_sent_as_given(client: AgentTxClient) -> None:
    tx = client.begin(policy={"max_local_depth": 5}).transaction_id
    assert client.get_transaction(tx).policy == agenttx.RollbackPolicy(max_local_depth=5)
    full = agenttx.RollbackPolicy(1, 0, 3.5)
    assert client.get_transaction(client.begin(policy=full).transaction_id).policy == full
    with pytest.raises(agenttx.InvalidArgument, match="unknown policy field"):
        client.begin(policy={"max_depth": 1})


# ---------------------------------------------------------------------------- the helper


def test_transaction_commits_on_a_clean_exit(client: AgentTxClient) -> None:
    with client.transaction(agent_id="helper") as tx:
        assert tx.next_step_id == 1
        assert tx.step("kv.put", {"key": "a", "value": 1}) == {"key": "a", "value": 1}
        assert tx.step("kv.get", {"key": "${steps.1.key}"})["value"] == 1
        assert tx.next_step_id == 3
    assert tx.status is TxStatus.COMMITTED
    assert tx.ended
    assert tx.next_step_id == 0
    assert client.get_transaction(tx.transaction_id).status is TxStatus.COMMITTED


def test_transaction_aborts_when_the_block_raises(client: AgentTxClient) -> None:
    def give_up(tx: Transaction) -> None:
        with tx:
            tx.step("kv.put", {"key": "a", "value": 1})
            raise ValueError("planner gave up")

    tx = client.transaction()
    with pytest.raises(ValueError, match="planner gave up"):
        give_up(tx)
    assert tx.status is TxStatus.ROLLED_BACK
    info = client.get_transaction(tx.transaction_id)
    assert info.status is TxStatus.ROLLED_BACK
    assert "ValueError: planner gave up" in info.abort_reason


def test_rollback_triggered_carries_what_the_loop_needs_and_the_loop_resumes(
    client: AgentTxClient,
) -> None:
    learned = False
    rollbacks: list[RollbackTriggered] = []
    outputs: dict[int, Any] = {}
    with client.transaction(agent_id="loop") as tx:
        while tx.next_step_id <= 5:
            step = tx.next_step_id
            tool, args = customer_plan(step, learned)
            try:
                outputs[step] = tx.step(tool, args)
            except RollbackTriggered as rb:
                rollbacks.append(rb)
                learned = "customer" in rb.clean_hint
    [rb] = rollbacks
    assert (rb.step_id, rb.strategy, rb.rollback_to_step) == (4, Strategy.DEPENDENCY_JUMP, 2)
    assert rb.next_step_id == 2
    assert "c-404" in rb.clean_hint
    assert rb.clean_hint.startswith("Hint: ")
    assert rb.constraints == [rb.clean_hint]
    assert rb.context_reset is False
    assert rb.error_category == "foreign_key"
    assert rb.result.status is StepStatus.ROLLBACK_TRIGGERED
    assert tx.constraints == [rb.clean_hint]
    assert outputs[3] == {"path": "drafts/c-1.json", "bytes": 2}
    assert tx.status is TxStatus.COMMITTED


def test_a_failed_step_raises_transaction_aborted(client: AgentTxClient) -> None:
    def charge(tx: Transaction) -> None:
        with tx:
            tx.step("kv.put", {"key": "a", "value": 1})
            tx.step("test.fatal")

    tx = client.transaction()
    with pytest.raises(TransactionAborted) as caught:
        charge(tx)
    aborted = caught.value
    assert "fatal" in aborted.abort_reason
    assert aborted.result.status is StepStatus.FAILED
    assert aborted.strategy is Strategy.ABORT
    assert tx.ended
    assert tx.next_step_id == 0
    assert tx.status is TxStatus.FAILED
    with pytest.raises(agenttx.NotActive, match="is FAILED; cannot step"):
        tx.step("kv.put", {"key": "b", "value": 1})


def test_an_unknown_outcome_raises_outcome_unknown(client: AgentTxClient) -> None:
    with pytest.raises(OutcomeUnknown) as caught, client.transaction() as tx:
        tx.step("test.uncertain")
    assert caught.value.step_id == 1
    assert caught.value.result.status is StepStatus.OUTCOME_UNKNOWN
    assert tx.status is TxStatus.ROLLED_BACK  # the block raised, so the helper rolled back


def test_explicit_rewind_and_commit_inside_the_block(client: AgentTxClient) -> None:
    with client.transaction() as tx:
        for i in range(1, 4):
            tx.step("kv.put", {"key": f"k{i}", "value": i})
        rewound = tx.rollback(to_step=2, reason="re-plan")
        assert (rewound.next_step_id, tx.next_step_id) == (2, 2)
        assert tx.step("kv.put", {"key": "k2", "value": 20})["value"] == 20
        done = tx.commit()
        assert done.steps_committed == 2
    assert tx.status is TxStatus.COMMITTED  # leaving the block did not commit twice
    with client.transaction() as other:
        other.rollback(reason="changed my mind")
    assert other.status is TxStatus.ROLLED_BACK


def test_a_helper_that_was_not_begun_says_so(client: AgentTxClient) -> None:
    tx = client.transaction()
    with pytest.raises(agenttx.FailedPrecondition, match="not begun"):
        tx.step("kv.get", {"key": "a"})
    tx.begin()
    with pytest.raises(agenttx.FailedPrecondition, match="already begun"):
        tx.begin()
    assert tx.step("kv.put", {"key": "a", "value": 1})["key"] == "a"
    assert "ACTIVE next_step_id=2" in repr(tx)


# ---------------------------------------------------------------------------- errors


# Each refusal with the trailing metadata our server sends beside it
# (agenttx.error_details.to_metadata):
# the class comes from the reason and fields, never from the message.
_SENT = {
    "not active": to_metadata(agenttx.NotActive("t", "COMMITTED", "commit")),
    "pending": to_metadata(agenttx.OutcomeUnknownPending("t", 3)),
    "revision": to_metadata(agenttx.RevisionConflict("x")),
}


@pytest.mark.parametrize(
    ("code", "message", "cls", "sent"),
    [
        ("INVALID_ARGUMENT", "step_id must be >= 1", agenttx.InvalidArgument, ()),
        ("NOT_FOUND", "transaction `x` not found", agenttx.NotFound, ()),
        ("FAILED_PRECONDITION", "illegal transition", agenttx.FailedPrecondition, ()),
        (
            "FAILED_PRECONDITION",
            "transaction t is COMMITTED; cannot commit",
            agenttx.NotActive,
            _SENT["not active"],
        ),
        (
            "FAILED_PRECONDITION",
            "step 3 has an unknown outcome",
            agenttx.OutcomeUnknownPending,
            _SENT["pending"],
        ),
        ("ALREADY_EXISTS", "request_id 'r' was already used", agenttx.AlreadyExists, ()),
        ("ABORTED", "already compensated", agenttx.Aborted, ()),
        (
            "ABORTED",
            "transaction t changed concurrently (revision 3)",
            agenttx.RevisionConflict,
            _SENT["revision"],
        ),
        ("DEADLINE_EXCEEDED", "Deadline Exceeded", agenttx.DeadlineExceeded, ()),
        ("INTERNAL", "internal error; see the server log", agenttx.InternalError, ()),
        ("UNKNOWN", "boom", agenttx.InternalError, ()),
    ],
)
def test_status_codes_map_back_to_agenttx_errors(
    code: str, message: str, cls: type, sent: tuple[tuple[str, str], ...]
) -> None:
    exc = error_from_status(code, message, sent)
    assert type(exc) is cls
    assert exc.message == message


def test_parsed_errors_carry_their_data() -> None:
    sent_wrong = agenttx.WrongStep("t", 9, 4)
    wrong = error_from_status(
        "FAILED_PRECONDITION",
        "transaction t expects step 4, got step 9; send step_id=4",
        to_metadata(sent_wrong),
    )
    assert isinstance(wrong, agenttx.WrongStep)
    assert (wrong.expected, wrong.got) == (4, 9)
    sent_conflict = agenttx.CommitConflict("t", [f"k{i}" for i in range(12)])
    conflict = error_from_status("ABORTED", str(sent_conflict), to_metadata(sent_conflict))
    assert isinstance(conflict, agenttx.CommitConflict)
    # The message names the first ten keys; the structured details carry all of them.
    assert conflict.keys == [f"k{i}" for i in range(12)]
    other = error_from_status("RESOURCE_EXHAUSTED", "message too large")
    assert type(other) is agenttx.AgentTxError
    assert other.code == "RESOURCE_EXHAUSTED"


def test_server_errors_arrive_as_agenttx_errors(client: AgentTxClient) -> None:
    with pytest.raises(agenttx.NotFound):
        client.get_transaction("tx_nope")
    with pytest.raises(agenttx.InvalidArgument, match="transaction_id is required"):
        client.execute_step("", 1, "kv.put", {})
    tx = client.begin().transaction_id
    with pytest.raises(agenttx.WrongStep) as wrong:
        client.execute_step(tx, 3, "kv.put", {"key": "a", "value": 1})
    assert wrong.value.expected == 1
    client.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="once")
    with pytest.raises(agenttx.AlreadyExists):
        client.execute_step(tx, 2, "kv.put", {"key": "a", "value": 2}, request_id="once")
    client.commit(tx)
    with pytest.raises(agenttx.NotActive) as inactive:
        client.execute_step(tx, 2, "kv.put", {"key": "a", "value": 2})
    assert inactive.value.status == "COMMITTED"


def test_a_commit_conflict_is_a_commit_conflict(client: AgentTxClient) -> None:
    with client.transaction() as first, client.transaction() as second:
        first.step("kv.put", {"key": "shared", "value": 1})
        second.step("kv.put", {"key": "shared", "value": 2})
        first.commit()
        with pytest.raises(agenttx.CommitConflict) as caught:
            second.commit()
    assert caught.value.keys == ["kv/shared"]
    assert second.status is TxStatus.FAILED
    assert second.ended


def test_no_server_raises_server_unavailable_after_the_retries() -> None:
    with (
        AgentTxClient(f"127.0.0.1:{free_port()}", retry=FAST_RETRY) as c,
        pytest.raises(ServerUnavailable, match="after 4 attempt") as caught,
    ):
        c.begin()
    assert isinstance(caught.value, ConnectionError)
    assert isinstance(caught.value, agenttx.AgentTxError)
    assert caught.value.attempts == 4


# ---------------------------------------------------------------------------- retries


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection reset (injected)"


class LoseReplies(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Lets a call reach the server, then loses its reply as UNAVAILABLE, ``times`` times."""

    def __init__(self, method: str, times: int) -> None:
        self.method = method
        self.times = times
        self.request_ids: list[str] = []

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        outcome = continuation(details, request)
        if details.method.endswith(self.method):
            self.request_ids.append(request.request_id)
            if self.times > 0:
                self.times -= 1
                outcome.result()  # the server ran it
                raise Unavailable()
        return outcome


def test_a_lost_reply_is_retried_with_the_same_request_id(server: ServerThread) -> None:
    lose = LoseReplies("ExecuteStep", times=1)
    with AgentTxClient(server.target, retry=FAST_RETRY, interceptors=[lose]) as c:
        tx = c.begin().transaction_id
        r = c.execute_step(tx, 1, "test.count", {"key": "lost-once"})
        info = c.get_transaction(tx)
    assert r.status is StepStatus.SUCCESS
    assert r.output == {"calls": 1}
    assert len(lose.request_ids) == 2
    assert len(set(lose.request_ids)) == 1
    assert CALLS["lost-once"] == 1  # the step ran once
    assert [(s.step_id, s.attempt) for s in info.steps] == [(1, 1)]
    assert info.next_step_id == 2


def test_the_helper_resends_the_request_id_after_server_unavailable(
    server: ServerThread,
) -> None:
    # Every attempt's reply is lost, so the step fails with ServerUnavailable although it ran;
    # the agent calls step again and gets the first outcome, not a second run.
    lose = LoseReplies("ExecuteStep", times=FAST_RETRY.max_attempts)
    with (
        AgentTxClient(server.target, retry=FAST_RETRY, interceptors=[lose]) as c,
        c.transaction() as tx,
    ):
        with pytest.raises(ServerUnavailable):
            tx.step("test.count", {"key": "lost-always"})
        assert tx.next_step_id == 1
        assert tx.step("test.count", {"key": "lost-always"}) == {"calls": 1}
        assert tx.next_step_id == 2
        assert tx.step("test.count", {"key": "lost-always"}) == {"calls": 2}
    assert len(set(lose.request_ids)) == 2  # one id for step 1's four sends, one for step 2
    assert CALLS["lost-always"] == 2


def test_a_client_started_before_the_server_retries_until_it_listens(
    tmp_path: Path, store_url: str
) -> None:
    late = client_server(tmp_path, store_url, port=free_port())
    timer = threading.Timer(0.3, late.start)
    timer.start()
    try:
        retry = RetryPolicy(max_attempts=30, initial_backoff_s=0.05, max_backoff_s=0.1)
        with AgentTxClient(late.target, retry=retry) as c:
            tx = c.begin(agent_id="early").transaction_id
            assert c.get_transaction(tx).agent_id == "early"
    finally:
        timer.join()
        late.stop()


# ---------------------------------------------------------------------------- watch


def test_watch_streams_events_until_the_commit(client: AgentTxClient) -> None:
    tx = client.begin().transaction_id
    first = threading.Event()

    def collect() -> list[TransactionEvent]:
        seen = []
        for e in client.watch(tx):
            seen.append(e)
            first.set()
        return seen

    with ThreadPoolExecutor(1) as pool:
        watching = pool.submit(collect)
        assert first.wait(30)
        client.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
        client.commit(tx)
        events = watching.result(timeout=30)
    assert events[0].status is TxStatus.ACTIVE
    assert events[-1].status is TxStatus.COMMITTED
    assert events[-1].kind == "commit"
    revisions = [e.revision for e in events]
    assert revisions == sorted(set(revisions))  # one event per revision, in order
    assert all(e.transaction_id == tx for e in events)


def test_iter_transactions_walks_every_page(client: AgentTxClient) -> None:
    made = [client.begin(agent_id="pager").transaction_id for _ in range(5)]
    page = client.list_transactions(agent_id="pager", page_size=2)
    assert len(page.transactions) == 2
    assert page.next_page_token
    walked = [t.transaction_id for t in client.iter_transactions(agent_id="pager", page_size=2)]
    assert walked == made  # oldest first: creation order


# ---------------------------------------------------------------------------- async twin


async def test_async_transaction_commits_rolls_back_and_resumes(server: ServerThread) -> None:
    async with AsyncAgentTxClient(server.target, retry=FAST_RETRY) as c:
        learned = False
        rollbacks: list[RollbackTriggered] = []
        async with c.transaction(agent_id="async") as tx:
            while tx.next_step_id <= 5:
                tool, args = customer_plan(tx.next_step_id, learned)
                try:
                    await tx.step(tool, args)
                except RollbackTriggered as rb:
                    rollbacks.append(rb)
                    learned = True
        assert [rb.next_step_id for rb in rollbacks] == [2]
        assert tx.status is TxStatus.COMMITTED
        info = await c.get_transaction(tx.transaction_id)
        assert info.status is TxStatus.COMMITTED

        async def give_up(tx: AsyncTransaction) -> None:
            async with tx:
                await tx.step("kv.put", {"key": "a", "value": 1})
                raise KeyError("no plan")

        doomed = c.transaction()
        with pytest.raises(KeyError):
            await give_up(doomed)
        assert (await c.get_transaction(doomed.transaction_id)).status is TxStatus.ROLLED_BACK

        with pytest.raises(TransactionAborted):
            async with c.transaction() as failing:
                await failing.step("test.fatal")
        assert failing.status is TxStatus.FAILED


async def test_async_client_has_every_rpc(server: ServerThread) -> None:
    async with AsyncAgentTxClient(server.target, retry=FAST_RETRY) as c:
        assert await c.health() == "SERVING"
        tx = (await c.begin(agent_id="a", labels=["x"])).transaction_id
        step = await c.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
        assert step.output == {"key": "a", "value": 1}
        await c.execute_step(tx, 2, "kv.put", {"key": "b", "value": 2})
        rewound = await c.rollback(tx, to_step=2)
        assert rewound.next_step_id == 2
        assert rewound.transaction_status is TxStatus.ACTIVE
        events: list[agenttx.TxStatus] = []
        first = asyncio.Event()
        watching = asyncio.create_task(_collect(c, tx, events, first))
        await asyncio.wait_for(first.wait(), 30)
        assert (await c.commit(tx)).steps_committed == 1
        await asyncio.wait_for(watching, 30)
        assert events[-1] is TxStatus.COMMITTED
        assert [t.transaction_id async for t in c.iter_transactions(label="x")] == [tx]
        assert "kv.put" in {t.name for t in await c.list_tools()}
        with pytest.raises(agenttx.NotFound):
            await c.get_transaction("tx_nope")


async def _collect(
    c: AsyncAgentTxClient, tx: str, into: list[agenttx.TxStatus], first: asyncio.Event
) -> None:
    async for e in c.watch(tx):
        into.append(e.status)
        first.set()


class LoseRepliesAsync(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        self.request_ids: list[str] = []

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        call = await continuation(details, request)
        if details.method == b"/agenttx.v1.AgentTxService/CommitTransaction":
            self.request_ids.append(request.request_id)
            if len(self.request_ids) == 1:
                await call  # the server committed
                raise Unavailable()
        return call


async def test_async_retry_resends_the_same_request_id(server: ServerThread) -> None:
    lose = LoseRepliesAsync()
    async with AsyncAgentTxClient(server.target, retry=FAST_RETRY, interceptors=[lose]) as c:
        async with c.transaction() as tx:
            await tx.step("kv.put", {"key": "a", "value": 1})
        assert tx.status is TxStatus.COMMITTED
    # Without the same id the second send would meet a COMMITTED transaction and fail.
    assert len(lose.request_ids) == 2
    assert len(set(lose.request_ids)) == 1


async def test_async_client_started_before_the_server(tmp_path: Path, store_url: str) -> None:
    late = client_server(tmp_path, store_url, port=free_port())
    timer = threading.Timer(0.3, late.start)
    timer.start()
    try:
        retry = RetryPolicy(max_attempts=30, initial_backoff_s=0.05, max_backoff_s=0.1)
        async with AsyncAgentTxClient(late.target, retry=retry) as c:
            assert (await c.begin()).next_step_id == 1
    finally:
        await asyncio.to_thread(timer.join)
        late.stop()


# ---------------------------------------------------------------------------- layering


def test_the_client_imports_no_engine_or_store() -> None:
    allowed = (
        "agenttx.client",
        "agenttx.types",
        "agenttx.errors",
        "agenttx.error_details",
        "agenttx.wire",
        "agenttx.audit",  # the audit chain's values and checks: standard library only
        "agenttx.receipts",  # preview and approval values: errors and types only
        "agenttx.plural",  # a count and its noun in a message: imports nothing
        "agenttx.fieldcopy",  # a value copied into its wire message and back: imports nothing
    )
    package = Path(agenttx.__file__).parent / "client"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
                if node.module == "agenttx":
                    names = [f"agenttx.{a.name}" for a in node.names]
            for name in names:
                if name.startswith("agenttx"):
                    assert name.startswith(allowed), f"{path.name} imports {name}"
