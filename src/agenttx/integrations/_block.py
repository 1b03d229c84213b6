"""The ``tx`` of ``async with agenttx.integrations.<framework>.transaction(...) as tx``: what
every framework's transaction object says the same way, around one ``AgentTransaction``.

A framework module subclasses ``TransactionBlock`` once and adds only its own shapes (tools,
toolsets, nodes, approval answers); the block's rules (begin on entry, commit or roll back on
exit) and what the caller reads after it are the core's, read through here. ``preview_shown``
is what a framework's approval pause shows a person, the same data in every framework.
"""

from __future__ import annotations

import dataclasses
from types import TracebackType
from typing import Any, Self

from agenttx.integrations._transaction import AgentTransaction
from agenttx.receipts import Preview, Refusal
from agenttx.types import CommitResult, TxStatus

__all__ = ["TransactionBlock", "preview_shown"]


class TransactionBlock:
    """One agent run as one AgentTx transaction, used as an ``async with`` block: entering it
    begins the transaction on the service (an ``agenttx.Engine`` or an
    ``agenttx.client.AsyncAgentTxClient``); leaving it commits, or rolls back when the block
    raises, ends owing steps a rewind undid, or its commit is refused. ``transaction_id``
    during, ``result`` after."""

    def __init__(self, core: AgentTransaction) -> None:
        self.core = core  # begin, steps in order, owed steps, commit or rollback, approval

    @property
    def transaction_id(self) -> str:
        return self.core.transaction_id

    @property
    def result(self) -> CommitResult | None:
        """The commit's reply, once the block committed."""
        return self.core.result

    @property
    def status(self) -> TxStatus | None:
        return self.core.status

    @property
    def next_step_id(self) -> int:
        return self.core.next_step_id

    @property
    def constraints(self) -> list[str]:
        return list(self.core.constraints)

    @property
    def replayed(self) -> int:
        """How many calls a resumed run (``resume=``) was answered from the record of the run
        it goes on with: the calls made before the crash, made again; none of them ran."""
        return self.core.replayed

    @property
    def refusals(self) -> list[Refusal]:
        return list(self.core.refusals)

    def to_redo(self) -> dict[int, str]:
        return self.core.to_redo()

    def system_prompt(self) -> str:
        """The constraints so far as a system-prompt fragment ("" when there are none)."""
        return self.core.system_prompt()

    async def __aenter__(self) -> Self:
        await self.core.begin()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.core.end(exc)


def preview_shown(p: Preview) -> dict[str, Any]:
    """What a person deciding on a commit is shown: the change and its receipt, plain data."""
    return {
        "agenttx": "approve_commit",
        "transaction_id": p.transaction_id,
        "receipt_id": p.receipt_id,
        "revision": p.revision,
        "expires_at": p.expires_at,
        "approval_reasons": list(p.approval_reasons),
        "changes": dataclasses.asdict(p.changes),
    }
