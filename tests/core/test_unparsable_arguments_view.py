"""A step that failed because its arguments were not JSON stays readable: the transaction's
view shows the text as sent (it used to fail every later read with INTERNAL)."""

from __future__ import annotations

import agenttx
from agenttx.types import StepStatus


async def test_a_step_with_arguments_that_are_not_json_is_shown_as_sent(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    r = await engine.execute_step(tx, 1, "kv.put", "{not json")
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    info = await engine.get_transaction(tx)
    [step] = info.steps
    assert step.arguments == "{not json"
    assert step.status == "FAILED"
