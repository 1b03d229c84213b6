"""Resuming an agent run whose process died: the calls made before the crash are answered with
what they got then, and the run goes on from there.

The transaction outlives the process: every step it took is durable on the service. A new
process attaches to it (``transaction(service, resume=transaction_id)``) and runs the framework
again, from the framework's own checkpoint or from the start with the same messages, so the
model makes again the calls it made before, with the same call ids.

How a call is recognised, exactly: every call that carries the framework's call id is sent
with a request id made of the transaction's id and that call id (``RequestIds``), so the
service stores the call's reply with its step. When a resumed run sends that call again, the
service's request idempotency answers with the stored reply: the tool does not run again, and
nothing here guesses by comparing arguments. The call is first sent as the next step; if the
service says its request id was used for another step (``AlreadyExists``: it was that step),
the recorded attempts of the same tool are tried (``Replay.candidates``), none of which can
run (each is not the next step). A call the service does not know runs as the next step, and
ends the replay: from then on the run is new.

Invariants: a replayed reply never moves ``next_step_id`` or the ledger (the transaction did
not change); a reply is a replayed one iff its revision is at most the one the run attached
at (``Replay.stored``). A call id used twice in one process gets a numbered request id
(``#2``…), so a scripted model that repeats ids still sends each call; after a resume, the
numbering is the same only for a replay from the start (docs/integrations.md).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from agenttx.types import StepResult, StepView

__all__ = ["Replay", "RequestIds"]

_PREFIX = "agenttx.call:"


class RequestIds:
    """The request id of each call of one transaction, from the framework's call id."""

    def __init__(self) -> None:
        self._uses: Counter[str] = Counter()

    def of(self, transaction_id: str, call_id: str) -> str:
        """The request id of the next call with ``call_id`` ("" for a call without one)."""
        if not call_id:
            return ""
        digest = hashlib.sha256(f"{transaction_id}\0{call_id}".encode()).hexdigest()[:40]
        base = _PREFIX + digest
        n = self._uses[base]
        self._uses[base] += 1
        return base if n == 0 else f"{base}#{n + 1}"


@dataclass(slots=True)
class Replay:
    """What a resumed run knows of the transaction it attached to: its recorded attempts and
    its revision then. ``active`` until the first call the service did not know."""

    attempts: Sequence[StepView]
    revision: int
    active: bool = True
    last: int = 0  # the step a replayed call was last answered at

    def stored(self, r: StepResult) -> bool:
        """True iff ``r`` is a reply stored before the run attached (no step ran for it)."""
        return r.revision <= self.revision

    def candidates(self, tool: str, next_step_id: int) -> list[int]:
        """The recorded steps of ``tool`` a replayed call may have been, other than the next
        step (already tried): from the last one answered on, then the earlier ones, so a
        replay in order finds each at its first try. (A step id can hold several attempts,
        a failed one and the one that replaced it: the request id tells them apart.)"""
        ids = sorted({a.step_id for a in self.attempts if a.tool_name == tool} - {next_step_id})
        return [s for s in ids if s >= self.last] + [s for s in ids if s < self.last]
