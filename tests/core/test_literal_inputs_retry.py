"""Issue 25: a failure whose inputs were all typed at the failing step — no ``${steps…}``
reference, no implicit edge, no read of state an earlier step wrote — retries that step in
place and undoes nothing earlier, whatever the tool raised: a path escape of ``fs.read``, a
user tool's ``KeyError`` on its own argument's value, an error no hint rule knows. The same
failures on a value an earlier step supplied still go back there. (A downstream MCP server's
own text is in ``tests/gateway/test_gateway_declared.py``.) Engine tests, both stores, the real
built-in tools.
"""

from __future__ import annotations

from typing import Any

import agenttx
from agenttx import StepStatus, Strategy
from agenttx.api.operations.replies import step_reply
from agenttx.types import RollbackPolicy
from agenttx.wire import agenttx_pb2 as pb

RETRY = Strategy.RETRY
DJ = Strategy.DEPENDENCY_JUMP
LB = Strategy.LOCAL_BACKTRACK

SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"


@agenttx.tool(name="test.lookup", effect="read")
async def lookup(name: str) -> dict[str, int]:
    """Index the tool's own table by its argument: a name it lacks is a bare KeyError."""
    return {"id": {"ada": 1, "grace": 2}[name]}


@agenttx.tool(name="test.settle", effect="read")
async def settle(period: str) -> dict[str, str]:
    """Fail with a bare ValueError (no message) unless the period is open."""
    if period != "2026-11":
        raise ValueError
    return {"settled": period}


class LedgerClosed(Exception):
    """A tool's own exception, named nothing a hint rule knows."""


@agenttx.tool(name="test.post", effect="read")
async def post(period: str) -> dict[str, str]:
    """Fail with a two-line message whose first line holds a secret."""
    if period != "2026-11":
        raise LedgerClosed(f"the ledger is closed for {period} (token {SECRET})\nsee the runbook")
    return {"posted": period}


@agenttx.tool(name="test.balance", effect="read")
async def balance(ctx: agenttx.ToolContext, account: str) -> dict[str, Any]:
    """Read an account that ``kv.put`` wrote; fail on any balance below zero."""
    value = await ctx.state.get(f"kv/{account}")
    if value is None or value < 0:
        raise ValueError(f"balance of {account} is not usable")
    return {"account": account, "balance": value}


TOOLS = [lookup, settle, post, balance]


async def _two_steps(engine: agenttx.Engine) -> str:
    """A transaction with two good steps an error at step 3 has nothing to do with."""
    tx = (await engine.begin()).transaction_id
    for step, key in ((1, "a"), (2, "b")):
        r = await engine.execute_step(tx, step, "kv.put", {"key": key, "value": step})
        assert r.status is StepStatus.SUCCESS, r.clean_hint
    return tx


async def _committed(engine: agenttx.Engine, key: str) -> Any:
    reader = (await engine.begin()).transaction_id
    r = await engine.execute_step(reader, 1, "kv.get", {"key": key})
    await engine.rollback(reader)
    return r.output["value"] if r.status is StepStatus.SUCCESS else None


async def _retried_in_place(engine: agenttx.Engine, tx: str, tool: str, args: Any) -> Any:
    r = await engine.execute_step(tx, 3, tool, args)
    assert r.status is StepStatus.ROLLBACK_TRIGGERED
    assert (r.strategy, r.rollback_to_step, r.next_step_id) == (RETRY, 3, 3), r.clean_hint
    assert r.clean_hint.removeprefix("Hint: ").strip()  # never an empty hint
    # steps 1 and 2 were kept: their outputs still resolve
    again = await engine.execute_step(tx, 3, "kv.get", {"key": "${steps.2.key}"})
    assert again.output == {"key": "b", "value": 2}
    assert (await engine.commit(tx)).committed
    assert (await _committed(engine, "a"), await _committed(engine, "b")) == (1, 2)
    return r


# --- the four families, each typed at the failing step -------------------------------------


async def test_a_typed_path_outside_the_sandbox_retries_in_place(
    engine: agenttx.Engine,
) -> None:
    r = await _retried_in_place(engine, await _two_steps(engine), "fs.read", {"path": "../x"})
    assert r.error_category == "path_escape"


async def test_a_user_tools_key_error_on_its_own_argument_retries_in_place(
    open_engine: Any,
) -> None:
    engine = await open_engine(tools=TOOLS)
    tx = await _two_steps(engine)
    r = await _retried_in_place(engine, tx, "test.lookup", {"name": "zzz"})
    assert (r.error_category, r.hint_key) == ("key_error", "zzz")


async def test_a_bare_value_error_retries_in_place_with_a_hint(open_engine: Any) -> None:
    engine = await open_engine(tools=TOOLS)
    r = await _retried_in_place(engine, await _two_steps(engine), "test.settle", {"period": "x"})
    assert (r.error_category, r.clean_hint) == ("unknown", "Hint: ValueError")


async def test_an_unrecognised_error_keeps_its_first_line_redacted(open_engine: Any) -> None:
    engine = await open_engine(tools=TOOLS)
    r = await _retried_in_place(engine, await _two_steps(engine), "test.post", {"period": "x"})
    assert r.error_category == "unknown"
    assert r.clean_hint == "Hint: LedgerClosed: the ledger is closed for x (token ***)"
    assert SECRET not in r.clean_hint


# --- a value an earlier step supplied is still that step's ---------------------------------


async def test_a_key_error_on_a_referenced_value_jumps_to_its_producer(
    open_engine: Any,
) -> None:
    engine = await open_engine(tools=TOOLS)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "who", "value": "zzz"})
    await engine.execute_step(tx, 2, "kv.put", {"key": "other", "value": 2})
    r = await engine.execute_step(tx, 3, "test.lookup", {"name": "${steps.1.value}"})
    assert (r.strategy, r.rollback_to_step, r.next_step_id) == (DJ, 1, 1)


async def test_an_unrecognised_error_on_a_referenced_value_is_not_retried(
    open_engine: Any,
) -> None:
    # Nothing traces it (no key named), so the decision is the reference's local backtrack.
    engine = await open_engine(tools=TOOLS)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "period", "value": "2026-10"})
    await engine.execute_step(tx, 2, "kv.put", {"key": "other", "value": 2})
    r = await engine.execute_step(tx, 3, "test.settle", {"period": "${steps.1.value}"})
    assert (r.strategy, r.rollback_to_step, r.next_step_id) == (LB, 2, 2)


async def test_a_path_from_an_earlier_output_is_not_retried(engine: agenttx.Engine) -> None:
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "where", "value": "../x"})
    await engine.execute_step(tx, 2, "kv.put", {"key": "other", "value": 2})
    r = await engine.execute_step(tx, 3, "fs.read", {"path": "${steps.1.value}"})
    assert r.error_category == "path_escape"
    assert (r.strategy, r.next_step_id) == (LB, 2)


async def test_a_failure_after_reading_state_an_earlier_step_wrote_is_not_retried(
    open_engine: Any,
) -> None:
    engine = await open_engine(tools=TOOLS)
    tx = (await engine.begin()).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "acct", "value": -5})
    await engine.execute_step(tx, 2, "kv.put", {"key": "other", "value": 2})
    # the account is typed, but the balance it reads is step 1's write
    r = await engine.execute_step(tx, 3, "test.balance", {"account": "acct"})
    assert r.error_category == "unknown"
    assert (r.strategy, r.next_step_id) == (LB, 2)


# --- persistence, the reference's decisions and a reference client -------------------------


async def test_a_persistent_failure_on_typed_inputs_escalates_on_the_references_schedule(
    open_engine: Any,
) -> None:
    """The retry takes the place of the first local backtrack: the same failure again goes on
    as the reference's would (LB to K − 2, reset), one replayed step cheaper."""
    engine = await open_engine(tools=TOOLS)
    tx = await _two_steps(engine)
    await engine.execute_step(tx, 3, "kv.put", {"key": "c", "value": 3})
    got = [(await engine.execute_step(tx, 4, "test.settle", {"period": "x"}))]
    assert (got[-1].strategy, got[-1].next_step_id) == (RETRY, 4)
    got.append(await engine.execute_step(tx, 4, "test.settle", {"period": "x"}))
    assert (got[-1].strategy, got[-1].next_step_id) == (LB, 2)  # the reference's second
    for step in (2, 3):
        await engine.execute_step(tx, step, "kv.put", {"key": f"s{step}", "value": step})
    got.append(await engine.execute_step(tx, 4, "test.settle", {"period": "x"}))
    assert got[-1].strategy is Strategy.GLOBAL_RESET


async def test_with_retries_off_the_decision_is_the_references(open_engine: Any) -> None:
    engine = await open_engine(tools=TOOLS)
    tx = (await engine.begin(policy=RollbackPolicy(max_step_retries=0))).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
    await engine.execute_step(tx, 2, "kv.put", {"key": "b", "value": 2})
    r = await engine.execute_step(tx, 3, "test.lookup", {"name": "zzz"})
    assert (r.strategy, r.next_step_id) == (LB, 2)


async def test_a_reference_client_is_sent_a_backtrack_to_the_failing_step_itself(
    open_engine: Any,
) -> None:
    engine = await open_engine(tools=TOOLS)
    tx = await _two_steps(engine)
    r = await engine.execute_step(tx, 3, "test.settle", {"period": "x"})
    assert r.strategy is RETRY
    wire = step_reply(r)  # a client that names none of our strategies
    assert wire.strategy == pb.ROLLBACK_STRATEGY_LOCAL_BACKTRACK
    assert (wire.rollback_to_step, wire.next_step_id) == (3, 3)  # nothing earlier undone
    assert step_reply(r, frozenset({RETRY})).strategy == pb.ROLLBACK_STRATEGY_RETRY
