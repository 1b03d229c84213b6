"""A process the unknown-undo crash test SIGKILLs (``test_undo_outcome_crash.py``).

    python undo_outcome_crash_worker.py URL LOG TX_FILE

Begins a transaction, runs ``pay.slow`` (step 1) and ``pay.uncertain`` (step 2), writes the
transaction's id to TX_FILE and rolls back: step 2's undo raises ``UncertainOutcome`` (its
record is checkpointed ``outcome_unknown``), then step 1's undo runs — and hangs while
``LOG/slow`` exists, which is when the test kills the process. Without ``LOG/slow`` the
rollback ends waiting on the unknown undo and the worker writes ``LOG/waiting``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import agenttx
from undo_outcome_tools import TOOLS


async def main(url: str, log: str, tx_file: str) -> None:
    engine = await agenttx.Engine.open(url, tools=TOOLS, background=False)
    tx = (await engine.begin()).transaction_id
    Path(tx_file).write_text(tx)
    for step, tool in ((1, "pay.slow"), (2, "pay.uncertain")):
        await engine.execute_step(tx, step, tool, {"n": step, "log": log})
    await engine.rollback(tx)
    Path(log, "waiting").write_text("waiting")
    await asyncio.sleep(120)  # never reached in the tests: killed before


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
