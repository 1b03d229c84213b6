"""Several agent sessions at once: three ``agenttx mcp`` processes on one SQLite data dir,
each running transactions at the same time, none losing one — including a process that starts
while another is in the middle of an outside step (its start-up must not take that step for
a crashed one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from mcp_harness import stdio_client, structured


async def run_task(c: Client, name: str, slow: bool = False) -> str:
    """begin → kv.put → fs.write → (a slow outside step) → commit; returns the transaction."""
    tx = structured(await c.call_tool("begin_transaction", {"agent_id": name}))["transaction_id"]
    steps: list[tuple[str, dict[str, Any]]] = [
        ("kv.put", {"key": f"owner/{name}", "value": name}),
        ("fs.write", {"path": f"{name}.txt", "contents": name}),
    ]
    if slow:
        steps.append(("test.wait", {"marker": name, "seconds": 3}))
    for step_id, (tool, arguments) in enumerate(steps, start=1):
        r = await c.call_tool(
            "run_step",
            {"transaction_id": tx, "step_id": step_id, "tool": tool, "arguments": arguments},
        )
        assert structured(r).get("status") == "SUCCESS", (name, step_id, structured(r))
    committed = structured(await c.call_tool("commit_transaction", {"transaction_id": tx}))
    assert committed.get("committed") is True, (name, committed)
    return tx


async def test_three_mcp_processes_on_one_data_dir_lose_no_transaction(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done: dict[str, str] = {}
    slow_started = anyio.Event()

    async def session(index: int, *, slow: bool = False, wait_for_slow: bool = False) -> None:
        if wait_for_slow:
            await slow_started.wait()  # start while the slow step of session 0 runs
        async with stdio_client(data, "legacy") as c:
            if slow:
                slow_started.set()
            for n in range(2):
                name = f"s{index}-t{n}"
                done[name] = await run_task(c, name, slow=slow and n == 0)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: session(0, slow=True))
            tg.start_soon(lambda: session(1))
            tg.start_soon(lambda: session(2, wait_for_slow=True))

    assert len(done) == 6
    # A fourth session sees every transaction committed and every write published.
    async with stdio_client(data, "legacy") as c:
        listed = structured(await c.call_tool("list_transactions", {"page_size": 100}))
        statuses = {t["transaction_id"]: t["status"] for t in listed["transactions"]}
        assert {statuses[tx] for tx in done.values()} == {"COMMITTED"}
        tx = structured(await c.call_tool("begin_transaction", {}))["transaction_id"]
        for step_id, name in enumerate(sorted(done), start=1):
            r = await c.call_tool(
                "run_step",
                {
                    "transaction_id": tx,
                    "step_id": step_id,
                    "tool": "kv.get",
                    "arguments": {"key": f"owner/{name}"},
                },
            )
            assert structured(r)["output"]["value"] == name
    for name in done:
        assert (data / "files" / f"{name}.txt").read_text() == name
    assert not (data / "files" / "undone").exists()  # no step was undone as a crashed one
