"""What an agent still owes its transaction: the steps that stand, and the steps a server-side
rewind undid that were not sent again.

One rule, kept here once, for every helper that drives a transaction for an agent — the
client's ``with client.transaction() as tx:`` and the framework integrations
(``agenttx.integrations``):

- a step that succeeded *stands* until a rewind undoes it;
- a rewind the server triggered (a step's ``ROLLBACK_TRIGGERED``) moves every standing step
  from its ``next_step_id`` on to *owed*: the agent planned it, the rewind took it back;
- a later success at an owed step's id pays that step;
- a rewind the caller asked for (``rollback(to_step)``) is the caller's decision: what it
  drops is not owed;
- ending cleanly while something is owed would commit without it, so the helper refuses
  (``StepsNotRedone``).

Invariant: a step id is in at most one of ``standing`` and ``owed``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StepLedger"]


class StepLedger:
    """The standing and the owed steps of one transaction, by step id."""

    def __init__(self) -> None:
        self.standing: dict[int, tuple[str, Any]] = {}  # step id -> (tool, output)
        self.owed: dict[int, str] = {}  # step id -> tool: rewound by the server, not redone

    def succeeded(self, step_id: int, tool: str, output: Any) -> None:
        """A step succeeded: it stands, and pays what was owed at its id."""
        self.standing[step_id] = (tool, output)
        self.owed.pop(step_id, None)

    def rewound(self, next_step_id: int) -> dict[int, str]:
        """The server rewound to ``next_step_id``: the steps it undid (step id -> tool, in
        order), now owed."""
        undone = {s: self.standing.pop(s)[0] for s in sorted(self.standing) if s >= next_step_id}
        self.owed.update(undone)
        return undone

    def dropped(self, next_step_id: int) -> None:
        """The caller rewound to ``next_step_id``: nothing from there on stands or is owed."""
        for steps in (self.standing, self.owed):
            for step_id in [s for s in steps if s >= next_step_id]:
                del steps[step_id]

    def to_redo(self) -> dict[int, str]:
        """The owed steps, by step id: step id -> tool."""
        return dict(sorted(self.owed.items()))

    def outputs(self) -> dict[int, Any]:
        """The output of every standing step, by step id."""
        return {step_id: output for step_id, (_, output) in sorted(self.standing.items())}
