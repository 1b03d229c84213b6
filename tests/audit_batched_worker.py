"""The worker ``tests/core/test_audit_batched.py`` kills: it opens an engine on the URL it is given,
begins a transaction, runs ``steps`` kv.put steps (their audit records stay pending: no write
with records follows them), prints the transaction id and waits to be killed.

Run as ``python tests/audit_batched_worker.py <url> <dir> <steps>``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import agenttx


async def run(url: str, root: Path, steps: int) -> None:
    engine = await agenttx.Engine.open(
        url, fs_root=root / "files", outbox_path=root / "outbox.jsonl", background=False
    )
    tx = (await engine.begin(agent_id="killed")).transaction_id
    for n in range(1, steps + 1):
        await engine.execute_step(tx, n, "kv.put", {"key": f"k{n}", "value": n})
    print(tx, flush=True)
    await asyncio.Event().wait()  # until SIGKILL: nothing is closed or flushed


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))
