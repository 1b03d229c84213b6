"""The parts of a resume that need no framework: the request id of each call, and the order
in which a replayed call's recorded steps are tried (``integrations/_replay.py``)."""

from __future__ import annotations

from agenttx.integrations._replay import Replay, RequestIds
from agenttx.types import StepView


def attempt(step_id: int, tool: str) -> StepView:
    return StepView(step_id, 1, tool, "SUCCESS", True, "{}", "{}", "", "", 0, 0.0, 0.0)


def test_a_call_id_names_one_request_per_transaction_and_a_repeat_is_numbered() -> None:
    ids = RequestIds()
    first = ids.of("tx_a", "call_1")
    assert first.startswith("agenttx.call:")
    assert len(first.encode()) <= 256  # the request id limit
    assert ids.of("tx_a", "call_1") == f"{first}#2"  # the model sent the same id again
    assert ids.of("tx_a", "call_1") == f"{first}#3"
    assert ids.of("tx_b", "call_1") != first  # scoped to the transaction
    assert RequestIds().of("tx_a", "call_1") == first  # the same in a resumed process
    assert ids.of("tx_a", "") == ""  # no call id: no request id, nothing to replay by


def test_a_replay_tries_the_steps_from_the_last_answered_on_then_the_earlier_ones() -> None:
    steps = [attempt(1, "put"), attempt(2, "get"), attempt(3, "put"), attempt(5, "put")]
    replay = Replay(steps, revision=9)
    assert replay.candidates("put", next_step_id=6) == [1, 3, 5]
    replay.last = 3
    assert replay.candidates("put", next_step_id=6) == [3, 5, 1]
    assert replay.candidates("put", next_step_id=5) == [3, 1]  # the next step was tried first
    assert replay.candidates("get", next_step_id=6) == [2]
    assert replay.candidates("delete", next_step_id=6) == []
