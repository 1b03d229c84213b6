"""A read rebuilds a transaction's graph from its rows at most once per revision: the edges of
a long history take long to rebuild, and a page redrawing the same revision gets them from the
reader's cache; a new revision rebuilds (the graph follows the steps). Both stores."""

from __future__ import annotations

from typing import Any

import pytest

from agenttx.core import reads


async def test_the_same_revision_rebuilds_once_a_new_one_again(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[int] = []
    real = reads.rebuild_graph

    def counting(steps: Any) -> Any:
        built.append(len(steps))
        return real(steps)

    monkeypatch.setattr(reads, "rebuild_graph", counting)
    tx = (await engine.begin(agent_id="edges")).transaction_id
    await engine.execute_step(tx, 1, "kv.put", {"key": "user", "value": {"id": 7}})
    await engine.execute_step(tx, 2, "kv.put", {"key": "copy", "value": "${steps.1.value}"})
    engine.images.cache.clear()  # as another process reading: no image, only the rows
    first = await engine.get_transaction(tx)
    second = await engine.get_transaction(tx)
    assert first.edges == second.edges
    assert (1, 2, "value") in [tuple(e) for e in first.edges]
    assert len(built) == 1
    await engine.execute_step(tx, 3, "kv.put", {"key": "again", "value": "${steps.2.value}"})
    engine.images.cache.clear()
    third = await engine.get_transaction(tx)
    assert len(built) == 2
    assert (2, 3, "value") in [tuple(e) for e in third.edges]
