"""Structured errors: one tree with stable reasons, one table to the gRPC status, and every
refusal's reason and fields on the wire as trailing metadata, which our client rebuilds the
error from — so rewording a message changes nothing the client recovers. Also the
``error_category`` vocabulary: the reference's names in field 9, ours in a field of its own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
import pytest_asyncio

import agenttx
from agenttx import errors
from agenttx.api.metrics import CallObserver
from agenttx.client import TransactionAborted, error_from_status
from agenttx.core.hints import REFERENCE_CATEGORIES, REFERENCE_CATEGORY, Category
from agenttx.error_details import FIELDS_KEY, MAX_FIELDS_BYTES, REASON_KEY, to_metadata
from agenttx.wire import agenttx_pb2 as pb
from agenttx.wire import agenttx_pb2_grpc as pb_grpc
from server_process import serving

if TYPE_CHECKING:  # imported at run time by pytest_plugins, so that pytest rewrites its asserts
    from reference_client import ReferenceClient
    from served_engine import Served

pytest_plugins = ["reference_client", "served_engine"]  # the reference client; ``s``, ``serve``

Code = grpc.StatusCode


async def refusal(call: Awaitable[Any]) -> tuple[Code, str, str, dict[str, Any]]:
    """``(status, message, reason, fields)`` of a refused call, read as any gRPC client can."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    metadata = dict(caught.value.trailing_metadata() or ())
    fields = json.loads(metadata[FIELDS_KEY]) if FIELDS_KEY in metadata else {}
    return caught.value.code(), caught.value.details(), metadata.get(REASON_KEY, ""), fields


# ---------------------------------------------------------------------------- the tree


def _tree(cls: type[errors.AgentTxError]) -> list[type[errors.AgentTxError]]:
    found = [cls]
    for sub in cls.__subclasses__():
        found.extend(c for c in _tree(sub) if c not in found)
    return found


def test_every_error_has_its_own_reason_and_the_strays_are_in_the_tree() -> None:
    import agenttx.client  # the step outcomes live there

    classes = [c for c in _tree(errors.AgentTxError) if c.__module__.startswith("agenttx")]
    reasons = [c.reason for c in classes]
    assert len(reasons) == len(set(reasons)), sorted(reasons)
    assert agenttx.client.TransactionAborted in classes
    from agenttx.core.refs import UnresolvedReference
    from agenttx.effects.channels import PermanentDeliveryError
    from agenttx.server import StartupError
    from agenttx.tools.builtin.fs import SandboxError
    from agenttx.tools.contract import ArgumentError

    # Their old homes still name them, and they are the tree's own classes.
    for stray in (ArgumentError, UnresolvedReference, SandboxError):
        assert issubclass(stray, errors.StepFailure)
        assert stray.code == "STEP_FAILED"
    assert StartupError is errors.StartupError
    assert PermanentDeliveryError is errors.PermanentDeliveryError
    assert issubclass(SandboxError, PermissionError)
    assert issubclass(errors.FatalToolError, errors.StepFailure)


def test_transaction_aborted_is_an_aborted() -> None:
    assert issubclass(TransactionAborted, errors.Aborted)
    assert TransactionAborted.code == "ABORTED"


def test_the_table_maps_every_refusal_to_a_real_status() -> None:
    for reason, row in errors.ERROR_CODES.items():
        assert row.reason == reason == row.error.reason
        assert row.grpc_status == row.error.code
        assert isinstance(Code[row.grpc_status], Code)
        assert 400 <= row.http_status < 600
    assert errors.error_code(errors.WrongStep("t", 2, 1)).grpc_status == "FAILED_PRECONDITION"
    # An error that is not a refusal (a step failure that escaped) is a bug: INTERNAL.
    assert errors.error_code(errors.ArgumentError("x")).grpc_status == "INTERNAL"

    class Custom(errors.NotFound):
        pass

    assert errors.error_code(Custom("x")).reason == "NOT_FOUND"  # its nearest ancestor's row


# ---------------------------------------------------------------------------- on the wire


async def test_every_refusal_carries_its_reason_and_fields(s: Served) -> None:
    code, _, reason, fields = await refusal(s.step("", 1, "kv.put", {}))
    assert (code, reason, fields) == (Code.INVALID_ARGUMENT, "INVALID_ARGUMENT", {})
    code, _, reason, fields = await refusal(s.step("tx_nope", 1, "kv.put", {}))
    assert (code, reason, fields) == (Code.NOT_FOUND, "NOT_FOUND", {})

    tx = await s.begin()
    code, message, reason, fields = await refusal(s.step(tx, 5, "kv.put", {"key": "a"}))
    assert (code, reason) == (Code.FAILED_PRECONDITION, "WRONG_STEP")
    assert fields == {"transaction_id": tx, "expected": 1, "got": 5}
    assert message == f"transaction {tx} expects step 1, got step 5; send step_id=1"

    await s.step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="r-1")
    code, _, reason, fields = await refusal(
        s.step(tx, 2, "kv.put", {"key": "a", "value": 2}, request_id="r-1")
    )
    assert (code, reason, fields) == (Code.ALREADY_EXISTS, "ALREADY_EXISTS", {"request_id": "r-1"})

    rival = await s.begin()
    await s.step(rival, 1, "kv.put", {"key": "a", "value": 9})
    await s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=rival))
    code, _, reason, fields = await refusal(
        s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
    )
    assert (code, reason) == (Code.ABORTED, "COMMIT_CONFLICT")
    assert fields == {
        "transaction_id": tx,
        "keys": ["kv/a"],
        "kind": "write",
        "compensation_errors": [],
    }

    code, _, reason, fields = await refusal(s.step(tx, 2, "kv.put", {"key": "b"}))
    assert (code, reason) == (Code.FAILED_PRECONDITION, "NOT_ACTIVE")
    assert fields == {"transaction_id": tx, "status": "FAILED", "action": "execute a step"}


# One instance of every error a call can be refused with, as the engine raises it.
REFUSALS: list[errors.AgentTxError] = [
    errors.InvalidArgument("step_id must be >= 1"),
    errors.NotFound("transaction `t` not found"),
    errors.FailedPrecondition("illegal transition"),
    errors.WrongStep("t", 5, 2),
    errors.NotActive("t", "EXECUTING", "commit"),
    errors.OutcomeUnknownPending("t", 3),
    errors.UndoRefused("t", 2, "step 2 (t.send) is irreversible: its effect cannot be undone"),
    errors.RedoRefused("t", 0, "no undone step to redo; send step 3 again"),
    errors.StepLimitReached("t", 10_000),
    errors.ReconcileNotDue("t", 3, 1500),
    errors.ReconcileInProgress("t", 3),
    errors.NoReconcileHandler("t", 3, "pay.legacy"),
    errors.CompensationRefused("t", 2, "pay.launch"),
    errors.CompensationApprovalRefused("t", "bob does not hold the 'approver' role"),
    errors.AlreadyExists("request_id 'r' was already used", request_id="r"),
    errors.Aborted("already compensated"),
    errors.CommitConflict("t", ["kv/a", "kv/ключ"], "read", ["undo of step 2 failed"]),
    errors.RevisionConflict("transaction t changed concurrently (revision 3)"),
    errors.DeadlineExceeded("transaction t is busy; gave up waiting"),
    errors.InternalError("store unavailable: connection refused"),
    errors.StoreFull("the store is full: SQLite write failed (database or disk is full)"),
    errors.TooManySubscribers(100, True, 5000),
    # preview receipts and approvals (docs/safety.md)
    errors.SnapshotMismatch("t", 3, 5, "a later change voided it"),
    errors.ApprovalRequired("t", "rcpt_1", "mode approval_required"),
    errors.PlanRequired("t", "plan.migrate"),
    errors.ReceiptRefused("t", "rcpt_1", "expired", "it expired 3 s ago"),
    errors.ApprovalRefused("t", "rcpt_1", "same_principal", "bob began the transaction"),
    errors.PolicyViolation("step 51 is past the cap", rule="max_steps"),
    errors.Unauthenticated("unknown API key (revoked, mistyped, or for another server)"),
    errors.PermissionDenied("transaction t belongs to another principal"),
]


def test_every_refusal_of_the_table_has_a_sample() -> None:
    sampled = {type(exc) for exc in REFUSALS}
    assert sampled == {r.error for r in errors.ERROR_CODES.values()} - {errors.ServerUnavailable}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def one_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    """One served engine for the module's wire-mapping tests: they replace the engine's call
    with one that raises, so no store is read and one server serves them all (a server and
    an engine per sample, on both stores, were nearly all of their time)."""
    from served_engine import Served  # loaded by pytest_plugins already, its asserts rewritten

    root = tmp_path_factory.mktemp("wire")
    engine = await agenttx.Engine.open(
        f"sqlite:///{root / 'agenttx.db'}", fs_root=root / "files", outbox_path=root / "o.jsonl"
    )
    async with serving(engine) as target:
        served = Served(engine, target)
        yield served
        await served.close()
    await engine.close()


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("sent", REFUSALS, ids=lambda exc: exc.reason)
async def test_each_status_code_arrives_with_its_reason_and_fields(
    one_server: Served, monkeypatch: pytest.MonkeyPatch, sent: errors.AgentTxError
) -> None:
    s = one_server

    async def refuse(*args: Any, **kwargs: Any) -> None:
        raise sent

    monkeypatch.setattr(s.engine, "get_transaction", refuse)
    code, message, reason, fields = await refusal(
        s.stub.GetTransaction(pb.GetTransactionRequest(transaction_id="t"))
    )
    row = errors.ERROR_CODES[sent.reason]
    assert (code.name, message, reason) == (row.grpc_status, sent.message, sent.reason)
    assert fields == sent.details()
    with pytest.raises(errors.AgentTxError) as rebuilt:
        await s.client.get_transaction("t")
    assert type(rebuilt.value) is type(sent)
    assert (rebuilt.value.message, rebuilt.value.details()) == (sent.message, sent.details())


async def test_a_step_failure_that_escapes_is_internal_and_says_nothing_more(
    s: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def escaped(*args: Any, **kwargs: Any) -> None:
        raise errors.ArgumentError("invalid arguments for tool secret.tool: token=abc")

    monkeypatch.setattr(s.engine, "get_transaction", escaped)
    code, message, reason, fields = await refusal(
        s.stub.GetTransaction(pb.GetTransactionRequest(transaction_id="t"))
    )
    # INTERNAL as every surface says it (api/public_errors.py): the reason, and the correlation
    # id of the one log line that holds the error; nothing of its text.
    assert (code, reason, list(fields)) == (Code.INTERNAL, "INTERNAL", ["correlation_id"])
    assert "secret" not in message
    assert "server log" in message
    assert fields["correlation_id"] in message


async def test_a_pending_outcome_and_an_internal_error_carry_theirs(
    serve: Callable[..., Awaitable[Served]], monkeypatch: pytest.MonkeyPatch
) -> None:
    @agenttx.tool(name="pay.send", effect="irreversible")
    async def send(ctx: agenttx.ToolContext) -> dict[str, str]:
        raise agenttx.UncertainOutcome("gateway timed out after sending")

    s = await serve(tools=[send])
    tx = await s.begin()
    unknown = await s.step(tx, 1, "pay.send", {})
    assert unknown.status == pb.STEP_STATUS_OUTCOME_UNKNOWN
    code, _, reason, fields = await refusal(
        s.stub.CommitTransaction(pb.CommitTransactionRequest(transaction_id=tx))
    )
    assert (code, reason, fields) == (
        Code.FAILED_PRECONDITION,
        "OUTCOME_UNKNOWN_PENDING",
        {"transaction_id": tx, "step_id": 1},
    )
    with pytest.raises(agenttx.OutcomeUnknownPending) as pending:
        await s.client.commit(tx)
    assert pending.value.step_id == 1

    async def broken(tx_id: str) -> None:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(s.engine, "get_transaction", broken)
    code, message, reason, fields = await refusal(
        s.stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx))
    )
    # Not an AgentTx error: the status, the reason INTERNAL and a correlation id, nothing more.
    assert (code, reason, list(fields)) == (Code.INTERNAL, "INTERNAL", ["correlation_id"])
    assert "secret" not in message


async def test_a_replayed_refusal_carries_the_same_fields(s: Served) -> None:
    tx = await s.begin()
    first = await refusal(s.step(tx, 3, "kv.put", {"key": "a"}, request_id="again"))
    second = await refusal(s.step(tx, 3, "kv.put", {"key": "a"}, request_id="again"))
    assert first == second
    assert first[3]["expected"] == 1


async def test_our_client_rebuilds_each_error_with_its_data(s: Served) -> None:
    c = s.client
    tx = (await c.begin()).transaction_id
    with pytest.raises(agenttx.WrongStep) as wrong:
        await c.execute_step(tx, 4, "kv.put", {"key": "a", "value": 1})
    assert (wrong.value.expected, wrong.value.got, wrong.value.transaction_id) == (1, 4, tx)
    await c.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1}, request_id="once")
    with pytest.raises(agenttx.AlreadyExists) as reused:
        await c.execute_step(tx, 2, "kv.put", {"key": "a", "value": 2}, request_id="once")
    assert reused.value.request_id == "once"
    rival = (await c.begin()).transaction_id
    await c.execute_step(rival, 1, "kv.put", {"key": "a", "value": 9})
    await c.commit(rival)
    with pytest.raises(agenttx.CommitConflict) as conflict:
        await c.commit(tx)
    assert (conflict.value.keys, conflict.value.kind) == (["kv/a"], "write")
    with pytest.raises(agenttx.NotActive) as inactive:
        await c.commit(tx)
    assert (inactive.value.status, inactive.value.action) == ("FAILED", "commit")


async def test_rewording_a_message_changes_nothing_the_client_recovers(
    s: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    tx = (await s.client.begin()).transaction_id
    real_step, real_commit = s.engine.execute_step, s.engine.commit

    async def reworded_step(*args: Any, **kwargs: Any) -> Any:
        try:
            return await real_step(*args, **kwargs)
        except agenttx.AgentTxError as exc:
            raise exc.with_message("Schritt abgelehnt. Bitte erneut versuchen.") from None

    async def reworded_commit(*args: Any, **kwargs: Any) -> Any:
        try:
            return await real_commit(*args, **kwargs)
        except agenttx.AgentTxError as exc:
            raise exc.with_message("Konflikt.") from None

    monkeypatch.setattr(s.engine, "execute_step", reworded_step)
    monkeypatch.setattr(s.engine, "commit", reworded_commit)
    with pytest.raises(agenttx.WrongStep) as wrong:
        await s.client.execute_step(tx, 7, "kv.put", {"key": "k", "value": 1})
    assert wrong.value.message == "Schritt abgelehnt. Bitte erneut versuchen."
    assert (wrong.value.expected, wrong.value.got) == (1, 7)
    keys = [f"k{i}" for i in range(12)]
    for i, key in enumerate(keys, 1):
        await s.client.execute_step(tx, i, "kv.put", {"key": key, "value": 1})
    rival = (await s.client.begin()).transaction_id
    for i, key in enumerate(keys, 1):
        await s.client.execute_step(rival, i, "kv.put", {"key": key, "value": 2})
    await s.client.commit(rival)
    with pytest.raises(agenttx.CommitConflict) as conflict:
        await s.client.commit(tx)
    assert conflict.value.message == "Konflikt."
    assert sorted(conflict.value.keys) == sorted(f"kv/{k}" for k in keys)  # all twelve
    with pytest.raises(agenttx.NotActive) as inactive:
        await s.client.execute_step(tx, 13, "kv.put", {"key": "x", "value": 1})
    assert inactive.value.status == "FAILED"


def test_missing_or_broken_details_fall_back_to_the_family_class() -> None:
    message = "transaction t expects step 4, got step 9; send step_id=4"
    cases: list[Any] = [
        None,
        (),
        ((REASON_KEY, "WRONG_STEP"),),  # no fields
        ((REASON_KEY, "WRONG_STEP"), (FIELDS_KEY, "{not json")),
        ((REASON_KEY, "WRONG_STEP"), (FIELDS_KEY, '["a list"]')),
        ((REASON_KEY, "WRONG_STEP"), (FIELDS_KEY, '{"transaction_id":"t","expected":"4"}')),
        ((REASON_KEY, "WRONG_STEP"), (FIELDS_KEY, '{"transaction_id":"t","expected":true}')),
        ((REASON_KEY, "NO_SUCH_REASON"),),
    ]
    for metadata in cases:
        exc = error_from_status("FAILED_PRECONDITION", message, metadata)
        assert type(exc) is agenttx.FailedPrecondition, metadata
        assert exc.message == message
    # A reason that does not belong to the status is ignored, never trusted.
    sent = to_metadata(agenttx.WrongStep("t", 9, 4))
    assert type(error_from_status("NOT_FOUND", "x", sent)) is agenttx.NotFound
    assert type(error_from_status("ABORTED", "x", ((REASON_KEY, "REVISION_CONFLICT"),))) is (
        agenttx.RevisionConflict
    )


def test_long_field_lists_are_cut_to_fit_the_metadata() -> None:
    keys = [f"orders/{i:06d}" for i in range(5000)]
    metadata = dict(to_metadata(agenttx.CommitConflict("t", keys)))
    assert len(metadata[FIELDS_KEY]) <= MAX_FIELDS_BYTES
    fields = json.loads(metadata[FIELDS_KEY])
    assert fields["keys"] == keys[: len(fields["keys"])]
    assert len(fields["keys"]) + fields["truncated"]["keys"] == 5000
    rebuilt = error_from_status("ABORTED", "conflict", tuple(metadata.items()))
    assert isinstance(rebuilt, agenttx.CommitConflict)
    assert rebuilt.keys == fields["keys"]


# ---------------------------------------------------------------------------- error_category


def test_every_category_has_a_reference_name() -> None:
    assert set(REFERENCE_CATEGORY) == {c.value for c in Category}
    assert set(REFERENCE_CATEGORY.values()) == set(REFERENCE_CATEGORIES)
    assert len(REFERENCE_CATEGORIES) == 21
    pairs = {
        "foreign_key": "foreign_key_violation",
        "not_null": "not_null_violation",
        "not_found": "missing_record",
        "missing_field": "missing_argument",
        "key_error": "missing_key",
        "http_auth": "authentication",
        "server_error": "http_server_error",
        "connection": "connection_failure",
    }
    assert {fine: REFERENCE_CATEGORY[fine] for fine in pairs} == pairs


async def test_field_9_speaks_the_reference_and_our_client_keeps_the_fine_name(
    s: Served,
) -> None:
    tx = await s.begin()
    r = await s.step(
        tx,
        1,
        "record.insert",
        {"table": "invoices", "id": "i-1", "fields": {"c": "x"}, "references": {"c": "people"}},
    )
    assert r.status == pb.STEP_STATUS_ROLLBACK_TRIGGERED
    assert (r.error_category, r.error_category_detail) == ("foreign_key_violation", "foreign_key")
    ok = await s.step(tx, 1, "kv.put", {"key": "a", "value": 1})
    assert (ok.error_category, ok.error_category_detail) == ("", "")
    history = await s.stub.GetTransaction(pb.GetTransactionRequest(transaction_id=tx))
    failed = [x for x in history.steps if x.status == "FAILED"]
    assert [(x.error_category, x.error_category_detail) for x in failed] == [
        ("foreign_key_violation", "foreign_key")
    ]

    info = await s.client.get_transaction(tx)
    view = next(v for v in info.steps if v.status == "FAILED")
    assert (view.error_category, view.reference_category) == (
        "foreign_key",
        "foreign_key_violation",
    )
    embedded = await s.engine.get_transaction(tx)
    assert [(v.error_category, v.reference_category) for v in embedded.steps if not v.live] == [
        ("foreign_key", "foreign_key_violation")
    ]
    result = await s.client.execute_step(tx, 2, "kv.get", {"key": "missing"})
    assert (result.error_category, result.reference_category) == ("not_found", "missing_record")


# ---------------------------------------------------------------------------- a reference client

# The reference client (reference_client.py, a process of its own): records field 9 of each
# failed step and the refusals exactly as it sees them.
REFERENCE_DRIVER = r"""
seen = {"categories": [], "refusals": []}
failing = [
    ("kv.get", {"key": "missing"}),
    ("record.insert", {"table": "t", "id": "1", "fields": {"c": "x"}, "references": {"c": "u"}}),
    ("record.get", {"table": "t", "id": "404"}),
    ("no.such_tool", {}),
    ("fs.write", {"path": "../escape", "contents": ""}),
    ("kv.put", {"value": 1}),
    ("kv.put", {"key": "${steps.9.value}", "value": 1}),
]
for tool, arguments in failing:
    tx = stub.BeginTransaction(pb.BeginTransactionRequest()).transaction_id
    r = stub.ExecuteStep(pb.ExecuteStepRequest(transaction_id=tx, step_id=1, tool_name=tool,
                                               arguments_json=json.dumps(arguments)))
    seen["categories"].append([tool, pb.StepStatus.Name(r.status), r.error_category])
tx = stub.BeginTransaction(pb.BeginTransactionRequest()).transaction_id
try:
    stub.ExecuteStep(pb.ExecuteStepRequest(transaction_id=tx, step_id=7, tool_name="kv.get"))
except grpc.RpcError as exc:
    seen["refusals"].append([tx, exc.code().name, exc.details()])
"""


async def test_a_reference_client_sees_its_own_category_names_and_plain_refusals(
    reference_client: ReferenceClient, s: Served
) -> None:
    seen = await reference_client.run(REFERENCE_DRIVER, s.target)
    assert seen["categories"] == [
        ["kv.get", "STEP_STATUS_ROLLBACK_TRIGGERED", "missing_record"],
        ["record.insert", "STEP_STATUS_ROLLBACK_TRIGGERED", "foreign_key_violation"],
        ["record.get", "STEP_STATUS_ROLLBACK_TRIGGERED", "missing_record"],
        ["no.such_tool", "STEP_STATUS_ROLLBACK_TRIGGERED", "unknown_tool"],
        ["fs.write", "STEP_STATUS_ROLLBACK_TRIGGERED", "permission_denied"],
        ["kv.put", "STEP_STATUS_ROLLBACK_TRIGGERED", "missing_argument"],
        ["kv.put", "STEP_STATUS_ROLLBACK_TRIGGERED", "unresolved_reference"],
    ]
    assert all(c in REFERENCE_CATEGORIES for _, _, c in seen["categories"])
    # A refusal is what it always was for such a client: the status code and the sentence.
    [[tx, code, details]] = seen["refusals"]
    assert (code, details) == (
        "FAILED_PRECONDITION",
        f"transaction {tx} expects step 1, got step 7; send step_id=1",
    )


async def test_the_call_log_keeps_our_finer_category(
    open_engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    engine = await open_engine()
    async with (
        serving(engine, interceptors=[CallObserver()]) as target,
        grpc.aio.insecure_channel(target) as channel,
    ):
        stub = pb_grpc.AgentTxServiceStub(channel)
        tx = (await stub.BeginTransaction(pb.BeginTransactionRequest())).transaction_id
        with caplog.at_level(logging.INFO, logger="agenttx.rpc"):
            await stub.ExecuteStep(
                pb.ExecuteStepRequest(
                    transaction_id=tx,
                    step_id=1,
                    tool_name="kv.get",
                    arguments_json=json.dumps({"key": "missing"}),
                )
            )
    [record] = [r for r in caplog.records if r.getMessage().startswith("ExecuteStep")]
    assert record.__dict__["error_category"] == "not_found"
