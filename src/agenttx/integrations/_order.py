"""The calls of one model message, let through in the message's order whatever runs them.

A framework that runs a message's tool calls as concurrent tasks (LangGraph's ``ToolNode``,
the OpenAI Agents SDK, pydantic-ai) says which calls the message holds, in order, before they
run (``expect``); each call then waits for its turn (``wait_turn``) and says when it is over
(``finish``). So the calls become steps in the message's order, and a replay of the same
messages is the same steps, whatever the scheduler did.

Invariants: a call is let through only when every call before it in the message has finished
(or was ``skip``ped); a call id the message does not hold goes through at once. A call that
waits for an earlier call that never *arrived* gives up after ``arrival_s`` with an error
naming it (a framework that drops a call must ``skip`` it); waiting for an earlier call that is
running has no limit — its own step timeout bounds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agenttx.errors import FailedPrecondition

__all__ = ["ARRIVAL_S", "MessageOrder"]

ARRIVAL_S = 30.0  # how long a call waits for an earlier call of its message to show up


class MessageOrder:
    """The order of the current message's calls, and which of them arrived and finished."""

    def __init__(self, arrival_s: float = ARRIVAL_S) -> None:
        self.arrival_s = arrival_s
        self._ids: list[str] = []  # the current message's call ids, in the message's order
        self._arrived: set[str] = set()
        self._finished: set[str] = set()
        self._changed = asyncio.Condition()  # notified whenever a call arrives or finishes

    def expect(self, call_ids: Sequence[str]) -> None:
        """A new message: its calls run in this order (the previous message's are forgotten)."""
        if len(set(call_ids)) != len(call_ids):
            raise FailedPrecondition(f"a message holds one call id twice: {list(call_ids)}")
        self._ids = list(call_ids)
        self._arrived, self._finished = set(), set()

    def holds(self, call_id: str) -> bool:
        return call_id in self._ids

    def _waiting_for(self, call_id: str) -> list[str]:
        earlier = self._ids[: self._ids.index(call_id)] if call_id in self._ids else []
        return [c for c in earlier if c not in self._finished]

    async def wait_turn(self, call_id: str) -> None:
        """Return when every call before ``call_id`` in the message has finished."""
        async with self._changed:
            self._arrived.add(call_id)
            self._changed.notify_all()
            while pending := self._waiting_for(call_id):
                absent = [c for c in pending if c not in self._arrived]
                try:
                    await asyncio.wait_for(self._changed.wait(), self.arrival_s if absent else None)
                except TimeoutError:
                    raise FailedPrecondition(
                        f"call {call_id} waited {self.arrival_s:g} s for "
                        f"{', '.join(absent)} of the same message, which never came; a "
                        "framework that does not run a call of the message must skip it"
                    ) from None

    async def finish(self, call_id: str) -> None:
        """``call_id`` is over (sent, or not sent): the next call of the message may go."""
        async with self._changed:
            self._arrived.add(call_id)
            self._finished.add(call_id)
            self._changed.notify_all()

    async def skip(self, call_id: str) -> None:
        """``call_id`` will not run (the framework refused it): the calls after it go on."""
        await self.finish(call_id)
