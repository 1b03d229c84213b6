"""Tools whose undo's outcome can be unknown, for ``test_undo_outcomes.py`` and its crash
worker (also loadable by a real ``agenttx serve --tools undo_outcome_tools``).

Each step is given a ``log`` directory; every call of an undo handler appends a line to
``<log>/<tool>.calls`` (so a test, in this process or another, counts them exactly), and the
``undo_reconcile`` handler answers what ``<log>/provider`` says ("happened", "not_happened",
"unknown"), as a provider asked about a refund would, and leaves what it was told in
``<log>/reconcile.ctx``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import agenttx


def _count(log: str, name: str) -> None:
    with (Path(log) / f"{name}.calls").open("a", encoding="utf-8") as f:
        f.write("call\n")


def calls(log: str | Path, name: str) -> int:
    """How many times the undo handler of tool ``name`` was called with ``log``."""
    path = Path(log) / f"{name}.calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _tool(name: str, **declared: Any) -> agenttx.Tool:
    async def act(ctx: agenttx.ToolContext, n: int, log: str) -> dict[str, int]:
        await ctx.register_undo({"n": n, "log": log})
        return {"n": n}

    act.__doc__ = "A charge at an outside provider."
    return agenttx.tool(name=name, effect="compensatable", **declared)(act)


# Its undo hangs for real (an await that never ends): only its undo_timeout ends it.
hang = _tool("pay.hang", undo_timeout=0.3)


@hang.undo
async def hang_undo(ctx: Any, n: int, log: str) -> None:
    _count(log, "pay.hang")
    await asyncio.Event().wait()


# Its undo sent the refund and lost the answer; the provider can be asked about it.
uncertain = _tool("pay.uncertain")


@uncertain.undo
async def uncertain_undo(ctx: Any, n: int, log: str) -> None:
    _count(log, "pay.uncertain")
    raise agenttx.UncertainOutcome(
        "the refund was sent; the provider did not answer",
        f"rf-{n}",
        provider="psp",
        retry_after_ms=0,
    )


@uncertain.undo_reconcile
async def uncertain_refund_status(ctx: agenttx.ReconcileContext, n: int, log: str) -> Any:
    _count(log, "pay.uncertain.reconcile")
    seen = {"undo_id": ctx.undo_id, "provider": ctx.provider, "operation_id": ctx.operation_id,
            "attempt": ctx.attempt, "idempotency_key": ctx.idempotency_key}  # fmt: skip
    (Path(log) / "reconcile.ctx").write_text(json.dumps(seen))
    answer = (Path(log) / "provider").read_text().strip()
    if answer == "unknown":
        return agenttx.Reconciled("unknown", retry_after_ms=0)
    return answer


# The same, with no way to ask: an operator settles it.
unasked = _tool("pay.unasked")


@unasked.undo
def unasked_undo(ctx: Any, n: int, log: str) -> None:  # a plain def: on a worker thread
    _count(log, "pay.unasked")
    raise agenttx.UncertainOutcome("the refund request timed out after it was sent")


# Its undo works, slowly when ``<log>/slow`` exists (the crash test kills the process then).
slow = _tool("pay.slow", undo_timeout=120)


@slow.undo
async def slow_undo(ctx: Any, n: int, log: str) -> None:
    _count(log, "pay.slow")
    if (Path(log) / "slow").exists():
        (Path(log) / "slow.started").write_text("started")
        await asyncio.sleep(120)


TOOLS = [hang, uncertain, unasked, slow]
