"""A rollback finished by recovery after a crash reports an undo that failed before the crash.

The undo records a rewind covers are fixed in its plan at its first write
(``rewind.undo_ids``). A restart runs only those still pending, so without the plan's ids an
undo that had failed before the crash (its record ``failed``, no longer pending) would vanish
from ``compensation_errors`` and the transaction would end as if every undo had worked, with
no ``requires_human``. Failed undos of an earlier, finished rewind are not reported again: they
share step numbers with the new steps, not record ids. Both stores; the crash is a
``SystemExit`` out of the rewinder in the middle of its undo actions, the store then reopened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agenttx
from compensation_tools import TOOLS, undone

FLAKY_2 = "undo comp.flaky#undo of step 2: ConnectionError: provider down: cannot undo 2"
OPTIONS: dict[str, Any] = {"tools": TOOLS, "background": False, "compensation_retries": 1}


@pytest.fixture
def log(tmp_path: Path) -> str:
    return str(tmp_path / "undone.jsonl")


async def _steps(eng: agenttx.Engine, tx: str, *tools: str, log: str) -> None:
    first = (await eng.get_transaction(tx)).next_step_id
    for n, name in enumerate(tools, start=first):
        r = await eng.execute_step(tx, n, name, {"n": n, "log": log})
        assert r.status is agenttx.StepStatus.SUCCESS, r.clean_hint


def _crash_after(eng: agenttx.Engine, newest: int) -> None:
    """The rewinder runs its ``newest`` newest undo actions, then the process 'dies'."""
    original = eng.rewinder.compensate

    async def die(rt: Any, rows: Any, **kw: Any) -> list[str]:
        await original(rt, sorted(rows, key=lambda u: u.id)[-newest:], **kw)
        raise SystemExit("crash in the middle of the rollback's undo actions")

    eng.rewinder.compensate = die  # type: ignore[method-assign]


async def test_without_a_crash_the_failed_undo_is_reported(open_engine: Any, log: str) -> None:
    eng = await open_engine(**OPTIONS)
    tx = (await eng.begin()).transaction_id
    await _steps(eng, tx, "comp.charge", "comp.flaky", "comp.best", log=log)
    r = await eng.rollback(tx)
    assert r.compensation_errors == [FLAKY_2]
    info = await eng.get_transaction(tx)
    assert info.requires_human
    assert info.compensation_errors == [FLAKY_2]


async def test_an_undo_failed_before_the_crash_is_reported_once_recovery_finishes(
    open_engine: Any, log: str
) -> None:
    eng = await open_engine(**OPTIONS)
    tx = (await eng.begin()).transaction_id
    await _steps(eng, tx, "comp.charge", "comp.flaky", "comp.best", log=log)
    _crash_after(eng, 2)  # best's undo works, flaky's fails, then the crash
    with pytest.raises(SystemExit):
        await eng.rollback(tx)
    assert undone(log) == [("comp.best", 3)]
    await eng.close()

    again = await open_engine(**OPTIONS)
    await again.recover()
    info = await again.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLED_BACK
    assert undone(log) == [("comp.best", 3), ("comp.charge", 1)]  # each once
    assert info.requires_human
    assert info.compensation_errors == [FLAKY_2]
    assert (await again.verify_audit(tx)).ok


async def test_a_failed_undo_of_an_earlier_rewind_is_not_reported_again(
    open_engine: Any, log: str
) -> None:
    eng = await open_engine(**OPTIONS)
    tx = (await eng.begin()).transaction_id
    await _steps(eng, tx, "comp.charge", "comp.flaky", log=log)
    first = await eng.rollback(tx, 2)  # flaky's undo fails: reported by this rewind
    assert first.compensation_errors == [FLAKY_2]
    await _steps(eng, tx, "comp.best", "comp.charge", log=log)  # steps 2 and 3 again
    _crash_after(eng, 1)
    with pytest.raises(SystemExit):
        await eng.rollback(tx)
    await eng.close()

    again = await open_engine(**OPTIONS)
    await again.recover()
    info = await again.get_transaction(tx)
    assert info.status is agenttx.TxStatus.ROLLED_BACK
    assert undone(log) == [("comp.charge", 3), ("comp.best", 2), ("comp.charge", 1)]
    assert info.compensation_errors == [FLAKY_2]  # the first rewind's line, not a second one
