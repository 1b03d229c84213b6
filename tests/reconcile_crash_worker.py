"""A process the reconcile crash tests SIGKILL (``test_reconcile_crash.py``).

    python reconcile_crash_worker.py URL step TX_FILE     # begin, then charge (hangs)
    python reconcile_crash_worker.py URL reconcile TX     # reconcile step 1 (its handler hangs)

The provider is ``PSP_ADDR``; ``PSP_MARK`` / ``PSP_RECONCILE_MARK`` say when the risky call or
the reconcile is under way, so the test kills the process right there.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import agenttx
from psp import TOOLS, charge


async def main(url: str, mode: str, arg: str) -> None:
    charge.timeout_s = 120.0  # long enough to be killed mid-call, not timed out
    engine = await agenttx.Engine.open(url, tools=TOOLS, background=False)
    if mode == "step":
        tx = (await engine.begin()).transaction_id
        Path(arg).write_text(tx)
        await engine.execute_step(tx, 1, "pay.charge", {"amount": 42})
    else:
        await engine.reconcile_step(arg, 1)
    await asyncio.sleep(120)  # never reached in the tests: killed before


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
