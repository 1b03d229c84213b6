"""User tools the ``agenttx serve`` replicas of ``test_replicas_cluster.py`` load
(``--tools cluster_tools``): a small bank kept in managed state under ``bank/<account>``.

``bank.transfer`` reads both balances and writes both in one step, so under snapshot isolation
two concurrent transfers touching one account conflict at commit (the second committer gets
ABORTED) instead of losing an update. An overdraft is refused as a step failure that aborts the
transaction (``FatalToolError``). The ``bank.*`` tools are state/read tools: their writes live
only in the transaction until it commits, so running one again after a crash is harmless
(``idempotent``). ``cluster.slow_note`` is an outside step that takes a while, to kill a
replica inside one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import agenttx


def _key(account: str) -> str:
    return f"bank/{account}"


@agenttx.tool(name="bank.open", effect="state", idempotent=True)
async def bank_open(ctx: agenttx.ToolContext, account: str, balance: int) -> dict[str, int]:
    """Open an account with a starting balance (refused if it exists)."""
    if await ctx.state.exists(_key(account)):
        raise agenttx.FatalToolError(f"account {account} already exists")
    await ctx.state.put(_key(account), balance)
    return {account: balance}


@agenttx.tool(name="bank.transfer", effect="state", idempotent=True)
async def bank_transfer(
    ctx: agenttx.ToolContext, src: str, dst: str, amount: int
) -> dict[str, int]:
    """Move ``amount`` from ``src`` to ``dst``; refuses an overdraft or a missing account."""
    if src == dst or amount <= 0:
        raise agenttx.FatalToolError("a transfer needs two accounts and a positive amount")
    balances = {}
    for account in (src, dst):
        value = await ctx.state.get(_key(account))
        if value is None:
            raise agenttx.FatalToolError(f"no account {account}")
        balances[account] = int(value)
    if balances[src] < amount:
        raise agenttx.FatalToolError(
            f"insufficient funds: {src} holds {balances[src]}, transfer of {amount} refused"
        )
    balances[src] -= amount
    balances[dst] += amount
    for account, value in balances.items():
        await ctx.state.put(_key(account), value)
    return balances


@agenttx.tool(name="bank.balances", effect="read", idempotent=True)
async def bank_balances(ctx: agenttx.ToolContext, accounts: list[str]) -> dict[str, int | None]:
    """Every listed account's balance as this transaction sees it (None: no such account)."""
    out: dict[str, int | None] = {}
    for account in accounts:
        value = await ctx.state.get(_key(account))
        out[account] = None if value is None else int(value)
    return out


@agenttx.tool(name="cluster.slow_note", effect="compensatable", idempotent=True, timeout=120)
async def slow_note(ctx: agenttx.ToolContext, name: str, seconds: float) -> dict[str, str]:
    """Write ``notes/<name>`` in the sandbox, then take ``seconds``: an outside step a replica
    can be killed inside (the transaction is EXECUTING meanwhile). Undone by removing it."""
    target = ctx.fs_root / "notes" / name
    await ctx.register_undo({"path": str(target)})
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(name)
    await asyncio.sleep(seconds)
    return {"name": name}


@slow_note.undo
async def remove_note(ctx: Any, path: str) -> None:
    Path(path).unlink(missing_ok=True)
