"""A history's texts pass through as stored, and long histories are read off the loop.

- ``StepView`` holds each attempt's arguments and output as JSON text: what the agent sent
  (its spacing included), what the wire carries, parsed only when ``arguments``/``output``
  are asked for; a failed attempt's text that is not JSON is shown as a JSON string of it.
- ``Store.load_steps(large=True)`` (a thread of the store's own) returns exactly what the
  plain read does, on both stores, and works again after the store is reopened.
- ``DependencyGraph.release`` empties a graph node by node without touching edges taken out.
- ``long_history`` tells a long history from the row alone, whether or not its body was
  rewritten since the steps ran.
- ``share_interpreter_promptly`` (what ``agenttx serve`` and ``agenttx mcp`` call first) sets
  the interpreter's switch interval below CPython's default.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

import agenttx
from agenttx.core.graph import DependencyGraph
from agenttx.core.offload import (
    LARGE_HISTORY_ATTEMPTS,
    SWITCH_INTERVAL_S,
    long_history,
    share_interpreter_promptly,
)
from agenttx.store.sqlite import SqliteStore
from agenttx.types import StepView
from both_stores import open_store_on_both  # noqa: F401 - the fixture
from pg import pg_url  # noqa: F401 - the fixture
from store_contract import OpenStore, cas, new_tx, step_row


async def test_history_shows_the_texts_as_sent_and_parses_them_on_demand(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    sent = '{"key": "k1",   "value": [1, 2.5, {"deep": "é"}]}'  # spacing of the agent's own
    ok = await engine.execute_step(tx, 1, "kv.put", sent)
    assert ok.status.value == "SUCCESS"
    bad = '{"key": "k2", "value": [1, 2'  # truncated: a step failure
    failed = await engine.execute_step(tx, 2, "kv.put", bad)
    assert failed.status.value != "SUCCESS"

    info = await engine.get_transaction(tx)
    first, second = info.steps
    assert second.status == "FAILED"
    assert first.arguments_json == sent
    assert first.arguments == {"key": "k1", "value": [1, 2.5, {"deep": "é"}]}
    assert first.arguments is first.arguments  # parsed once
    assert json.loads(first.output_json) == first.output
    # Not JSON: shown as a JSON string of the text sent, so every field still parses.
    assert json.loads(second.arguments_json) == bad
    assert second.arguments == bad
    assert second.output_json == ""
    assert second.output is None
    # Equality is by the texts (the values follow from them).
    again = (await engine.get_transaction(tx)).steps[0]
    assert again == first
    assert hash(again) == hash(first)


def test_a_step_view_built_from_texts_parses_lazily() -> None:
    view = StepView(
        step_id=1,
        attempt=1,
        tool_name="kv.put",
        status="SUCCESS",
        live=True,
        arguments_json='{"a":[1,2]}',
        output_json="",
        clean_hint="",
        error_category="",
        epoch=0,
        started_at=0.0,
        finished_at=0.0,
    )
    assert view.arguments == {"a": [1, 2]}
    assert view.output is None
    assert dataclasses.asdict(view)["arguments_json"] == '{"a":[1,2]}'
    assert "arguments" not in dataclasses.asdict(view)  # a value derived, not a field


async def test_a_large_read_returns_what_the_plain_read_does(open_store: OpenStore) -> None:
    store = await open_store()
    try:
        await new_tx(store, "tx_big")
        rev = 1
        for seq in range(1, 41):
            live = seq % 7 != 0
            row = step_row("tx_big", seq, seq, status="SUCCESS" if live else "FAILED", live=live)
            rev = await store.finish_step(cas("tx_big", rev), row)
        for live_only in (False, True):
            for after in (0, 25):
                plain = await store.load_steps("tx_big", live_only=live_only, after_seq=after)
                large = await store.load_steps(
                    "tx_big", live_only=live_only, after_seq=after, large=True
                )
                assert large == plain
                assert plain
        assert await store.load_steps("tx_none", live_only=False, large=True) == []
    finally:
        await store.close()
    store = await open_store()  # the bulk reader comes back with a reopened store
    try:
        assert len(await store.load_steps("tx_big", live_only=False, large=True)) == 40
    finally:
        await store.close()


async def test_a_closed_store_refuses_a_large_read(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "closed.db")
    await store.open()
    await store.close()
    with pytest.raises(agenttx.InternalError, match="closed"):
        await store.load_steps("tx", live_only=False, large=True)


def test_releasing_a_graph_empties_it_and_keeps_the_edges_taken_out() -> None:
    graph = DependencyGraph()
    graph.add_step(1, {"q": "x"}, {"order_id": "ord-12345", "n": 7})
    graph.add_step(2, {"order_id": "ord-12345"}, {"ok": True})
    edges = graph.edges()
    assert edges  # step 2 used step 1's output value: an implicit edge
    graph.release()
    assert graph.edges() == []
    assert edges
    assert edges[0].target == 2
    graph.add_step(1, {"q": "y"}, {"order_id": "ord-67890"})  # usable again after a release
    assert graph.edges() == []


def test_a_long_history_is_told_by_its_live_steps_or_its_attempts() -> None:
    n = LARGE_HISTORY_ATTEMPTS
    assert not long_history(1, {})
    assert not long_history(n + 1, {"step_seq": n})
    # A plain successful step advances next_step_id but leaves the body (and step_seq) alone.
    assert long_history(n + 2, {"step_seq": 3})
    # Failed and rewound attempts count too, though next_step_id stays low.
    assert long_history(2, {"step_seq": n + 1})


def test_serving_commands_shorten_the_switch_interval() -> None:
    before = sys.getswitchinterval()
    try:
        share_interpreter_promptly()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
    finally:
        sys.setswitchinterval(before)
    assert SWITCH_INTERVAL_S < 0.005  # shorter than CPython's default
