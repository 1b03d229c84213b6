"""Refusals with API keys: the refuser is the key's owner, whatever the call names. An agent
key cannot refuse (nor, so, void) its own commit's receipt by naming an approver; another
tenant's approver does not see the transaction; the tenant's approver refuses as herself, and
the agent's commit with the receipt is then refused naming her. Over real gRPC with TLS and a
real key file (the fixture of ``test_auth_approvals``)."""

from __future__ import annotations

import pytest

import agenttx
from test_auth_approvals import secured
from test_auth_server import Secured

pytestmark = pytest.mark.stores("sqlite")

__all__ = ["secured"]


async def test_the_refuser_is_the_keys_owner(secured: tuple[Secured, str, str]) -> None:
    server, carol_key, _ = secured
    alice, carol, bob = (
        server.client(server.keys.alice),
        server.client(carol_key),
        server.client(server.keys.bob),
    )
    try:
        tx = (await alice.begin(agent_id="a", mode="approval_required")).transaction_id
        await alice.execute_step(tx, 1, "kv.put", {"key": "limit", "value": 10})
        p = await alice.preview_commit(tx)
        with pytest.raises(agenttx.AgentTxError) as posing:
            await alice.refuse_commit(tx, p.receipt_id, "no", principal="carol", roles=["approver"])
        assert posing.value.reason in ("PERMISSION_DENIED", "APPROVAL_REFUSED")
        with pytest.raises(agenttx.NotFound):  # another tenant's approver
            await bob.refuse_commit(tx, p.receipt_id, "no", principal="bob", roles=["approver"])
        assert (await alice.get_transaction(tx)).receipts[0].status == "issued"

        r = await carol.refuse_commit(
            tx, p.receipt_id, "ten is too many", principal="alice", roles=["admin"]
        )
        assert r.refused_by == "carol"
        with pytest.raises(agenttx.ReceiptRefused) as refused:
            await alice.commit(tx, receipt_id=p.receipt_id)
        assert "'carol'" in refused.value.message
        assert "ten is too many" in refused.value.message
        [view] = (await alice.get_transaction(tx)).receipts
        assert (view.status, view.decided_by) == ("refused", "carol")
    finally:
        for c in (alice, carol, bob):
            await c.close()
