"""Tools with each compensation contract, for the compensation tests (also loaded by a real
``agenttx serve --tools compensation_tools``). Each undo appends a JSON line to the ``log``
file its step was given, so a test in another process sees which undos ran, in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import agenttx


def _note(log: str, tool: str, n: int) -> None:
    with Path(log).open("a", encoding="utf-8") as f:
        f.write(json.dumps({"undo": tool, "n": n}) + "\n")


def undone(log: str | Path) -> list[tuple[str, int]]:
    """The undos that ran, oldest first."""
    path = Path(log)
    if not path.exists():
        return []
    return [(d["undo"], d["n"]) for d in map(json.loads, path.read_text().splitlines())]


def _tool(name: str, **contract: Any) -> agenttx.Tool:
    async def act(ctx: agenttx.ToolContext, n: int, log: str) -> dict[str, int]:
        await ctx.register_undo({"n": n, "log": log})
        return {"n": n}

    act.__doc__ = f"An outside call ({contract.get('compensation', 'supported')})."
    t = agenttx.tool(name=name, effect="compensatable", **contract)(act)

    def undo(ctx: Any, n: int, log: str) -> None:
        if name == "comp.flaky":
            raise ConnectionError(f"provider down: cannot undo {n}")
        _note(log, name, n)

    t.undo(undo)
    return t


charge = _tool("comp.charge", compensation="supported", compensation_window_s=3600)
best = _tool("comp.best", compensation="best_effort", compensation_window_s=3600)
launch = _tool("comp.launch", compensation="rollback_not_supported", compensation_window_s=0.01)
brief = _tool("comp.brief", compensation="supported", compensation_window_s=0.01)
refund = _tool("comp.refund", compensation="supported", compensation_approval=True)
flaky = _tool("comp.flaky", compensation="supported", compensation_window_s=3600)


@agenttx.tool(name="comp.fatal")
async def fatal(ctx: agenttx.ToolContext) -> None:
    """Always fails beyond repair: the transaction is aborted (and its steps undone)."""
    raise agenttx.FatalToolError("the provider closed the account")


TOOLS = [charge, best, launch, brief, refund, flaky, fatal]
