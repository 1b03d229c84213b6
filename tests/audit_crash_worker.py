"""The worker the audit chain's SIGKILL test (``tests/e2e/test_audit_crash.py``) kills: it opens
an engine on the URL it is given and runs transactions without pause — state steps, an
outside step with an undo, failing steps that rewind, staged effects, commits and aborts —
until it is killed, so the kill lands anywhere in a step, a rewind, a commit or a delivery.

Run as ``python tests/audit_crash_worker.py <url> <dir> <seed>``; prints ``ready`` once open.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

import agenttx


@agenttx.tool(name="crash.remote", effect="compensatable", idempotent=False)
async def remote(ctx: agenttx.ToolContext, name: str) -> dict[str, str]:
    await ctx.register_undo({"name": name})
    await asyncio.sleep(0)  # a moment inside the outside call, where a kill may land
    return {"name": name}


@remote.undo
async def unremote(ctx: Any, name: str) -> None:
    return None


async def run(url: str, root: Path, seed: int) -> None:
    rng = random.Random(seed)
    engine = await agenttx.Engine.open(
        url, fs_root=root / "files", outbox_path=root / "outbox.jsonl", tools=[remote]
    )
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        tx = (await engine.begin(agent_id=f"w{seed}")).transaction_id
        step = 1
        for _ in range(rng.randint(1, 6)):
            choice = rng.random()
            if choice < 0.5:
                r = await engine.execute_step(
                    tx, step, "kv.put", {"key": f"k{n}/{step}", "value": n}
                )
            elif choice < 0.65:
                r = await engine.execute_step(tx, step, "crash.remote", {"name": f"{n}/{step}"})
            elif choice < 0.8:
                r = await engine.execute_step(tx, step, "kv.get", {"key": f"missing/{n}"})
            else:
                r = await engine.execute_step(
                    tx, step, "effect.stage", {"channel": "c", "payload": {"n": n}}
                )
            if r.next_step_id == 0:
                break
            if r.status is agenttx.StepStatus.OUTCOME_UNKNOWN:
                await engine.resolve_outcome(tx, step, happened=rng.random() < 0.5, output={})
                r2 = await engine.get_transaction(tx)
                step = r2.next_step_id
                continue
            step = r.next_step_id
        info = await engine.get_transaction(tx, history=False)
        if info.status is not agenttx.TxStatus.ACTIVE:
            continue
        if rng.random() < 0.7:
            await engine.commit(tx)
        elif rng.random() < 0.5:
            await engine.rollback(tx, reason="worker")
        # else: left open for the next run to continue or the reaper


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))
