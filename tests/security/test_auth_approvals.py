"""Approvals with API keys (issue 13 meets issue 15): the approver is the key's owner, whatever
the call names. An agent key cannot approve its own commit by naming another principal; an
approver key of the same tenant can; one of another tenant does not even see the transaction;
an agent of the same tenant may not act on another principal's transaction. Over real gRPC
with TLS, keys from a real key file (the fixtures of ``test_auth_server``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import agenttx
from agenttx.auth.keys import hash_secret, new_secret
from agenttx.server import ServeConfig, start
from test_auth_server import Secured, self_signed, write_keys

pytestmark = pytest.mark.stores("sqlite")


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[tuple[Secured, str, str]]:
    cert, key = self_signed(tmp_path)
    keys = write_keys(tmp_path / "keys.toml")
    carol, dave = new_secret(), new_secret()  # acme's approver; acme's second agent
    with keys.file.open("a") as f:
        f.write(
            f'\n[[key]]\nhash = "{hash_secret(carol)}"\nprincipal = "carol"\ntenant = "acme"\n'
            f'roles = ["approver"]\n'
            f'\n[[key]]\nhash = "{hash_secret(dave)}"\nprincipal = "dave"\ntenant = "acme"\n'
            f'roles = ["agent"]\n'
        )
    running = await start(
        ServeConfig(
            listen_addr="127.0.0.1:0",
            data_dir=tmp_path / "data",
            metrics_addr=None,
            api_keys=keys.file,
            tls_cert=cert,
            tls_key=key,
        )
    )
    try:
        yield Secured(running, keys, cert.read_bytes()), carol, dave
    finally:
        await running.stop(0)


async def test_the_approver_is_the_keys_owner(secured: tuple[Secured, str, str]) -> None:
    server, carol_key, dave_key = secured
    alice = server.client(server.keys.alice)
    carol, bob, dave = (
        server.client(carol_key),
        server.client(server.keys.bob),
        server.client(dave_key),
    )
    try:
        # alice names someone else as the principal: the key's owner begins it anyway.
        begun = await alice.begin(agent_id="a", principal="mallory", mode="approval_required")
        tx = begun.transaction_id
        assert (await alice.get_transaction(tx)).principal == "alice"
        step = await alice.execute_step(tx, 1, "kv.put", {"key": "limit", "value": 10})
        assert step.status is agenttx.StepStatus.SUCCESS
        preview = await alice.preview_commit(tx)
        # An agent key naming another principal and the approver role is still alice, an
        # agent: refused, and the receipt stays unapproved.
        with pytest.raises(agenttx.AgentTxError) as refused:
            await alice.approve_commit(
                tx, preview.receipt_id, principal="carol", roles=["approver"]
            )
        assert refused.value.reason in ("PERMISSION_DENIED", "APPROVAL_REFUSED")
        with pytest.raises(agenttx.ApprovalRequired):
            await alice.commit(tx, receipt_id=preview.receipt_id)
        # Another tenant's approver does not see it; another agent of acme may not act on it.
        with pytest.raises(agenttx.NotFound):
            await bob.approve_commit(tx, preview.receipt_id, principal="bob", roles=["approver"])
        with pytest.raises(agenttx.PermissionDenied):
            await dave.undo_step(tx)
        # carol, acme's approver, approves as herself whatever she names.
        approval = await carol.approve_commit(
            tx, preview.receipt_id, principal="alice", roles=["admin"]
        )
        assert approval.approved_by == "carol"
        committed = await alice.commit(
            tx, receipt_id=preview.receipt_id, expected_revision=preview.revision
        )
        assert committed.committed
    finally:
        for c in (alice, carol, bob, dave):
            await c.close()
