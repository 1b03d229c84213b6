"""The public surface: everything users need is exported from ``agenttx``, sorted."""

from __future__ import annotations

import agenttx
import agenttx.client


def test_all_is_sorted_and_complete() -> None:
    assert agenttx.__all__ == sorted(agenttx.__all__)
    for name in agenttx.__all__:
        assert hasattr(agenttx, name), name
    for needed in ("Engine", "tool", "ToolContext", "FatalToolError", "UncertainOutcome"):
        assert needed in agenttx.__all__


def test_error_codes_are_stable() -> None:
    assert agenttx.InvalidArgument("x").code == "INVALID_ARGUMENT"
    assert agenttx.NotFound("x").code == "NOT_FOUND"
    assert agenttx.WrongStep("t", 2, 1).code == "FAILED_PRECONDITION"
    assert agenttx.CommitConflict("t", ["k"]).code == "ABORTED"
    assert agenttx.AlreadyExists("x").code == "ALREADY_EXISTS"


def test_the_audit_chain_types_are_public() -> None:
    # What Engine.verify_audit and Engine.audit_records return, and the event vocabulary.
    # And the audit keys ``Engine.open(audit_keys=)`` takes, and their file's reader.
    for name in ("AuditKey", "AuditKeys", "AuditKind", "AuditRecord", "AuditVerification",
                 "read_audit_keys"):  # fmt: skip
        assert name in agenttx.__all__
        assert getattr(agenttx, name).__module__ == "agenttx"
    assert agenttx.AuditKind.COMMIT == "commit"


def test_the_client_s_resume_loop_is_exported() -> None:
    for name in ("AgentTurn", "StepCall", "StepsNotRedone"):
        assert name in agenttx.__all__
        assert getattr(agenttx, name) is getattr(agenttx.client, name)
    assert agenttx.StepsNotRedone("t", {1: "kv.put"}).reason == "STEPS_NOT_REDONE"
