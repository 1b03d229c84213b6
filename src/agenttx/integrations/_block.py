"""The ``tx`` of ``async with agenttx.integrations.<framework>.transaction(...) as tx``: what
every framework's transaction object says the same way, around one ``AgentTransaction``.

A framework module subclasses ``TransactionBlock`` once and adds only its own shapes (tools,
toolsets, nodes, approval answers); the block's rules (begin on entry, commit or roll back on
exit) and what the caller reads after it are the core's, read through here.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from agenttx.integrations._transaction import AgentTransaction
from agenttx.receipts import Refusal
from agenttx.types import CommitResult, TxStatus

__all__ = ["TransactionBlock"]


class TransactionBlock:
    """One agent run as one AgentTx transaction, used as an ``async with`` block."""

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
