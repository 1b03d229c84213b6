"""What our async client rebuilds of compensation beyond the conformance table's fields
(``cases.COMPENSATION`` runs every outcome on every surface): the whole compensation as the
engine keeps it, a listing by status that names what each transaction compensates, and the
tools' compensation contracts. On every store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import agenttx
from compensation_tools import TOOLS

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


async def test_the_client_rebuilds_a_compensation_and_lists_it(
    serve: Callable[..., Awaitable[Served]], tmp_path: Path
) -> None:
    s = await serve(tools=TOOLS)
    log = str(tmp_path / "undone.jsonl")
    tx = (await s.engine.begin(agent_id="a")).transaction_id
    for i, name in enumerate(("comp.charge", "comp.launch"), start=1):
        r = await s.engine.execute_step(tx, i, name, {"n": i, "log": log})
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint
    await s.engine.commit(tx)
    k = await s.client.compensate(tx, reason="customer refund")
    assert k == await s.engine.compensation(k.transaction_id)
    listed = await s.client.list_transactions(statuses=["FAILED"])
    assert [(t.transaction_id, t.compensation_for) for t in listed.transactions] == [
        (k.transaction_id, tx)
    ]
    tools = {t.name: t for t in await s.client.list_tools()}
    assert tools["comp.refund"].compensation_approval
    assert tools["comp.brief"].compensation_window_s == 0.01
