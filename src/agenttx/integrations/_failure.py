"""How a call that did not take effect is told: to the model, and to the block's caller.

To the model (``FailedCall.text``), in the framework's own tool-error result: the clean hint,
which steps the rewind undid, the step the transaction resumes at, and the constraints learned
so far — what it needs to plan its next call. A call that was not sent because an earlier call
of the same message failed says so, and where to plan from.

To the caller: ``StepsOwed``, when the agent finished while steps a rewind undid were never
sent again. It is the client helper's ``StepsNotRedone`` (same rule, same fields), worded for
an agent run: nothing was committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agenttx.client._errors import StepsNotRedone
from agenttx.errors import FailedPrecondition

__all__ = ["FailedCall", "StepsOwed", "constraints_prompt", "refusal_text"]


def _steps(steps: Mapping[int, str]) -> str:
    listed = ", ".join(f"{step_id} ({tool})" for step_id, tool in sorted(steps.items()))
    return f"{'step' if len(steps) == 1 else 'steps'} {listed}"


@dataclass(frozen=True, slots=True)
class FailedCall:
    """A model's call that did not take effect, and where the transaction stands after it."""

    tool: str  # the name the model called
    step_id: int  # the step it was sent as (0: not sent)
    hint: str  # the clean hint (empty for a call not sent)
    resume_at: int  # the step the next call will be
    undone: Mapping[int, str] = field(default_factory=dict)  # steps this rewind undid
    owed: Mapping[int, str] = field(default_factory=dict)  # every step undone, not redone yet
    constraints: Sequence[str] = ()
    context_reset: bool = False  # forget what the undone steps returned
    # Not sent: ``tool`` and ``step_id`` of the earlier call of the same message that failed.
    after: tuple[str, int] | None = None

    def text(self) -> str:
        """The tool-error result the model reads."""
        if self.after is not None:
            tool, step_id = self.after
            lines = [
                f"AgentTx: not run. An earlier call of the same message, {tool} (step "
                f"{step_id}), failed and the transaction was rewound; it resumes at step "
                f"{self.resume_at}. Plan this call again from there."
            ]
        else:
            lines = [
                f"AgentTx: {self.tool} (step {self.step_id}) failed and was rolled back; the "
                f"transaction resumes at step {self.resume_at}.",
                self.hint if self.hint.startswith("Hint:") else f"Hint: {self.hint or '(none)'}",
            ]
            if self.undone:
                lines.append(f"Undone by this rewind: {_steps(self.undone)}.")
            if self.context_reset and self.undone:
                lines.append("Forget what the undone steps returned: it no longer holds.")
        if self.owed:
            lines.append(
                f"Still to send again before you finish: {_steps(self.owed)}, changed as the "
                "hint says. Nothing is committed while a step the rewind undid is missing."
            )
        prompt = constraints_prompt(self.constraints)
        if prompt:
            lines.append(prompt)
        return "\n".join(lines)


def constraints_prompt(constraints: Sequence[str]) -> str:
    """The constraints as a fragment of a system prompt ("" when there are none)."""
    if not constraints:
        return ""
    body = "\n".join(f"- {c}" for c in constraints)
    return f"Constraints learned from failed steps of this transaction (keep to them):\n{body}"


class StepsOwed(StepsNotRedone):
    """The agent finished while steps a rewind undid were not sent again: the transaction was
    rolled back, not committed. ``steps`` maps each to the tool it called."""

    reason = "STEPS_OWED"

    def __init__(self, transaction_id: str, steps: dict[int, str]) -> None:
        FailedPrecondition.__init__(
            self,
            f"transaction {transaction_id} was rolled back, not committed: the agent finished "
            f"while {_steps(steps)} undone by a rewind {'was' if len(steps) == 1 else 'were'} "
            "never sent again. The tool-error results told the model which steps to redo; "
            "give it more turns, or end the run with an error to roll back on purpose.",
        )
        self.transaction_id = transaction_id
        self.steps = dict(sorted(steps.items()))


def refusal_text(refused_by: str, reason: str, resume_at: int) -> str:
    """What the model reads when a person refused to let the transaction commit."""
    return (
        f"AgentTx: the commit was refused by {refused_by!r}: {reason}\n"
        f"Nothing was committed; the transaction is still open at step {resume_at}. Change it "
        "as the refusal asks (your next call is that step), then finish again to ask for "
        "approval of the new change, or finish with an error to roll it back."
    )
