"""``tools/list`` and the ``instructions`` are a published contract: hosts and models read
them, the TypeScript SDK validates them, and a change to a description or a schema changes
what every agent sees. They are derived from the operation table's ``mcp`` bindings
(``api/operations/mcp_bindings.py``); this pins the whole of both, byte for byte, to
``mcp_tools_list.json``, so any change is one this file's diff shows.

A deliberate change: ``.venv/bin/python tests/surfaces/test_mcp_tools_list.py`` writes the
file anew; review its diff."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

import agenttx
from agenttx.api.mcp.effect_tools import add_effect_tools
from agenttx.api.mcp.served import embedded
from agenttx.api.mcp.server import AgentTxMCP

pytestmark = pytest.mark.stores("sqlite")

GOLDEN = Path(__file__).with_name("mcp_tools_list.json")


async def listing(engine: Any) -> str:
    """What a client is shown, as the golden file spells it: the instructions, every tool
    (the operator's outbox tools offered, ``--mcp-effect-tools``), and the names of those listed
    only when offered; without them the list is the others, in the same order."""
    listed: dict[bool, list[dict[str, Any]]] = {}
    for offered in (False, True):
        mcp = AgentTxMCP(embedded(engine))
        if offered:
            add_effect_tools(mcp)
        async with Client(mcp.server) as c:
            tools = (await c.list_tools()).tools
            instructions = c.instructions
        listed[offered] = [t.model_dump(by_alias=True, exclude_none=True) for t in tools]
    opt_in = [t["name"] for t in listed[True] if t not in listed[False]]
    assert listed[False] == [t for t in listed[True] if t["name"] not in opt_in]
    shown = {"instructions": instructions, "opt_in": opt_in, "tools": listed[True]}
    return json.dumps(shown, indent=1, ensure_ascii=False) + "\n"


async def test_tools_list_and_instructions_are_what_was_published(engine: Any) -> None:
    listed = await listing(engine)
    if listed != GOLDEN.read_text():
        now, then = json.loads(listed), json.loads(GOLDEN.read_text())
        changed = [t.get("name") for t in now["tools"] if t not in then["tools"]]
        assert now == then, f"changed: {changed or 'the order, opt_in or the instructions'}"
        assert listed == GOLDEN.read_text()  # the same values, spelled otherwise


async def _write() -> None:
    with tempfile.TemporaryDirectory() as d:
        engine = await agenttx.Engine.open(
            f"sqlite:///{Path(d) / 'agenttx.db'}",
            fs_root=Path(d) / "files",
            outbox_path=Path(d) / "outbox.jsonl",
        )
        try:
            GOLDEN.write_text(await listing(engine))
        finally:
            await engine.close()
    print(f"wrote {GOLDEN}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(_write())
