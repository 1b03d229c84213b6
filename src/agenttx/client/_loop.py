"""The resume loop, driven for an agent: ``tx.run(agent)`` asks the agent for each next call,
sends it, and after a rollback asks again with the hint, the constraints and the step to
resume at — until the agent says it is done.

The agent is a callback ``agent(turn) -> StepCall | (tool, arguments) | None``: ``turn`` is
what it needs to plan (``AgentTurn``), ``None`` means "nothing more to do". The loop is bounded
(``max_calls``) so an agent that never finishes cannot spin for ever; the server's replay
budget bounds the rewinds themselves. A step that aborts the transaction (``TransactionAborted``)
or leaves an outcome unknown (``OutcomeUnknown``) ends the loop with that error.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from agenttx.client._errors import RollbackTriggered
from agenttx.errors import FailedPrecondition, InvalidArgument

__all__ = [
    "DEFAULT_MAX_CALLS",
    "Agent",
    "AgentTurn",
    "Answer",
    "AsyncAgent",
    "StepCall",
    "as_call",
    "ask",
    "ask_async",
    "calls_exhausted",
]

# Calls one ``run`` makes at most: far above what a task of a few dozen steps and its retries
# need, low enough that a looping agent stops within seconds.
DEFAULT_MAX_CALLS = 100


@dataclass(frozen=True, slots=True)
class StepCall:
    """The next call an agent wants: ``tool`` with ``arguments`` (a JSON-able value, may hold
    ``${steps.N.path}`` references)."""

    tool: str
    arguments: Any = None
    raw_context: str = ""


@dataclass(frozen=True, slots=True)
class AgentTurn:
    """What the agent sees before each call.

    ``next_step_id`` is the step the call will be; after a rollback it is where to resume, and
    ``clean_hint`` / ``error`` say what went wrong (both empty after a success or at the start).
    ``to_redo`` lists the rewound steps not redone yet (by id, with the tool each called), so
    the agent knows what it still owes; ``outputs`` holds the output of every step that
    stands, by step id."""

    next_step_id: int
    clean_hint: str = ""
    constraints: tuple[str, ...] = ()
    context_reset: bool = False
    error: RollbackTriggered | None = None
    to_redo: Mapping[int, str] = field(default_factory=dict)
    outputs: Mapping[int, Any] = field(default_factory=dict)
    calls: int = 0  # calls made so far by this run


# What an agent answers: the next call, or None when it is done.
Answer: TypeAlias = "StepCall | tuple[str, Any] | None"
Agent: TypeAlias = Callable[[AgentTurn], Answer]
AsyncAgent: TypeAlias = Callable[[AgentTurn], "Answer | Awaitable[Answer]"]


def as_call(value: Any) -> StepCall:
    """The agent's answer as a ``StepCall``; a clear error for anything else."""
    if isinstance(value, StepCall):
        return value
    if isinstance(value, tuple) and len(value) in (1, 2, 3) and isinstance(value[0], str):
        return StepCall(*value)
    raise InvalidArgument(
        f"the agent returned {value!r}; return StepCall(tool, arguments), "
        "a (tool, arguments) tuple, or None when it is done"
    )


def calls_exhausted(transaction_id: str, max_calls: int) -> FailedPrecondition:
    return FailedPrecondition(
        f"transaction {transaction_id}: the agent made {max_calls} calls without finishing "
        "(returning None); raise max_calls if the task is that long"
    )


def ask(agent: Agent, turn: AgentTurn) -> Answer:
    """The blocking client's question to the agent: its answer for ``turn``."""
    return agent(turn)


async def ask_async(agent: AsyncAgent, turn: AgentTurn) -> Answer:
    """The asyncio client's question: the agent may be a plain or a coroutine function."""
    answer = agent(turn)
    if inspect.isawaitable(answer):
        return await answer
    return answer
