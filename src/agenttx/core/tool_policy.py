"""The policy's word on one tool call: allowed, needs approval, or forbidden.

A dry run at ``policy_and_schema`` or above reports this decision (``docs/dry-run.md``). The
engine asks a ``ToolPolicy`` it was given at construction; the default allows everything, so
an engine without a policy behaves as before, and a policy file (``--policy``) plugs in by
implementing ``decide``. The decision is a pure read: it changes nothing and is cheap, since it
runs on the event loop for every step it is asked about.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol

from agenttx.store.contract import TxRow
from agenttx.tools.contract import Tool


class PolicyDecision(enum.StrEnum):
    ALLOWED = "allowed"  # the call may run as it is
    NEEDS_APPROVAL = "needs_approval"  # it may run, but the commit needs an approved receipt
    FORBIDDEN = "forbidden"  # the policy refuses the call


@dataclass(frozen=True, slots=True)
class PolicyVerdict:
    decision: PolicyDecision
    reason: str = ""  # which rule decided, in words a person reads ("" when allowed)


class ToolPolicy(Protocol):
    def decide(self, transaction: TxRow, tool: Tool, arguments: Any) -> PolicyVerdict:
        """The decision on ``tool`` called with ``arguments`` (resolved and validated) as the
        next step of ``transaction``. Must not block or change anything."""
        ...


class AllowAll:
    """The policy of an engine given none: every call is allowed."""

    def decide(self, transaction: TxRow, tool: Tool, arguments: Any) -> PolicyVerdict:
        return PolicyVerdict(PolicyDecision.ALLOWED)


ALLOW_ALL = AllowAll()
