"""One agent run as one transaction: the part every framework integration shares.

``AgentTransaction`` begins when its block is entered, sends each tool call the model makes as
the next step, commits when the block ends and rolls back when it raises. A framework module
(``agenttx.integrations.langgraph`` …) only adapts tools and messages around it.

Invariants:

- ``next_step_id`` is the step the service expects, as its last reply said (0 once ended);
  a call is always sent as exactly that step.
- One step at a time (``_turn``): calls that arrive together are sent one after another,
  never with the same step id.
- The calls of one model message become steps in the message's order, so a replay of the
  same messages is the same steps: ``in_order`` sends them one by one for a framework that
  lets us run the message; for one that runs them as concurrent tasks, ``expect`` names the
  message's calls and each ``call(..., call_id=)`` waits its turn (``MessageOrder``). Either
  way, after a call of the message rewinds the transaction the rest are not sent (they were
  planned on steps that no longer stand).
- ``ledger`` is the client helper's rule (``StepLedger``): steps a server-side rewind undid
  are owed until sent again, and the block does not commit while one is owed (``StepsOwed``;
  it rolls back instead).
- ``pending_preview`` is the preview a person is being shown, ``None`` once decided or once a
  step made it stale; ``approved`` is the preview whose receipt the commit names.
- ``result`` is the commit's reply once the block committed, else None.
- A call with the framework's call id is sent with a request id made of it (``RequestIds``);
  a run that resumed a transaction (``resume=``) is answered the calls it makes again from
  what the service stored (``Replay``, ``_replay.py``) until its first new call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypedDict, TypeVar, Unpack

from agenttx.client._errors import OutcomeUnknown, TransactionAborted
from agenttx.client._ledger import StepLedger
from agenttx.errors import AgentTxError, AlreadyExists, FailedPrecondition, NotActive
from agenttx.integrations._catalog import ToolSpec, listed_tools, tools_not_loaded
from agenttx.integrations._failure import FailedCall, StepsOwed, constraints_prompt
from agenttx.integrations._names import ToolNames
from agenttx.integrations._order import MessageOrder
from agenttx.integrations._replay import Replay, RequestIds
from agenttx.receipts import Approval, Preview, Refusal
from agenttx.service import TransactionService
from agenttx.types import CommitResult, RollbackPolicy, StepResult, StepStatus, TxStatus

__all__ = ["APPROVER", "AgentTransaction", "CallOutcome", "TransactionOptions"]

APPROVER = ("approver",)  # the role an approval or a refusal needs (docs/safety.md)

Call = TypeVar("Call")
Reply = TypeVar("Reply")


class TransactionOptions(TypedDict, total=False):
    """How the transaction begins: what every framework's ``transaction(service, ...)`` takes,
    declared once; each is the service's ``begin`` argument of that name, and one not given
    is the service's default."""

    agent_id: str
    mode: str  # "approval_required" makes the commit wait for a person's approval
    principal: str
    metadata: Mapping[str, str] | None
    policy: RollbackPolicy | Mapping[str, Any] | None
    isolation: str
    labels: Sequence[str]
    # Not a begin argument: the id of an open transaction to go on with instead of beginning
    # one (its run's process died); the run's calls made before are answered from it.
    resume: str


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What became of one call: its output, or why it did not take effect."""

    output: Any = None
    failure: FailedCall | None = None
    result: StepResult | None = None  # the service's reply; None for a call not sent
    replayed: bool = False  # answered with the reply stored before a resume: nothing ran

    @property
    def ok(self) -> bool:
        return self.failure is None


class AgentTransaction:
    """An agent run's transaction on ``service`` (an ``Engine`` or an ``AsyncAgentTxClient``):
    ``async with AgentTransaction(service, agent_id=…) as tx:`` then ``await tx.call(…)``."""

    def __init__(self, service: TransactionService, **options: Unpack[TransactionOptions]) -> None:
        self.service = service
        # Only what the caller chose: each side's defaults stand for the rest.
        given = {k: options.get(k, "") for k in ("principal", "mode", "isolation")}
        self._begin_args: dict[str, Any] = {k: v for k, v in given.items() if v}
        if labels := options.get("labels", ()):
            self._begin_args["labels"] = list(labels)
        self._agent_id = options.get("agent_id", "")
        self._resume = options.get("resume", "")
        self._metadata, self._policy = options.get("metadata"), options.get("policy")
        self.transaction_id = ""
        self.status: TxStatus | None = None  # None until begun
        self.next_step_id = 0
        self.constraints: list[str] = []  # every failure's hint so far (the service's list)
        self.result: CommitResult | None = None
        self.ledger = StepLedger()
        self.rewinds = 0  # server-side rewinds so far; in_order stops a message at a new one
        self.last_failure: FailedCall | None = None
        self.pending_preview: Preview | None = None
        self.approved: Preview | None = None
        self.refusals: list[Refusal] = []  # every refusal of this run, oldest first
        self._turn = asyncio.Lock()  # held while a step is out: one at a time, FIFO
        self.order = MessageOrder()  # the current message's calls, for frameworks that gather
        self._message_rewinds = 0  # ``rewinds`` when the current message was expected
        self._tools: dict[str, ToolSpec] | None = None  # the service's listing, read once
        # The names the model knows the tools by, every wrapped tool's: one table, so two
        # tools offered under one name are refused when the second is wrapped.
        self.names = ToolNames()
        self.request_ids = RequestIds()
        self.replay: Replay | None = None  # set by a resume, until the run's first new call
        self.replayed = 0  # calls answered from the service's record after a resume

    # ------------------------------------------------------------------ the block

    async def __aenter__(self) -> AgentTransaction:
        await self.begin()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.end(exc)

    async def begin(self) -> None:
        if self.status is not None:
            raise FailedPrecondition(f"transaction {self.transaction_id} was already begun")
        if self._resume:
            await self.attach(self._resume)
            return
        r = await self.service.begin(
            self._agent_id, self._metadata, self._policy, **self._begin_args
        )
        self.transaction_id, self.next_step_id = r.transaction_id, r.next_step_id
        self.status = r.transaction_status

    async def attach(self, transaction_id: str) -> None:
        """Go on with the open transaction ``transaction_id``, begun by a run whose process
        died: its standing steps stand here, the steps a rewind undid and nothing sent again
        are owed, and the calls the run makes again are answered from the service's record
        (``_replay.py``)."""
        info = await self.service.get_transaction(transaction_id)
        if info.status.terminal:
            raise NotActive(transaction_id, info.status.value, "resume the run")
        self.transaction_id, self.status = transaction_id, info.status
        self.next_step_id, self.constraints = info.next_step_id, list(info.constraints)
        for a in info.steps:
            if a.live and a.status == StepStatus.SUCCESS.value:
                self.ledger.succeeded(a.step_id, a.tool_name, a.output)
        live = {a.step_id for a in info.steps if a.live}
        for a in info.steps:
            # Undone at or after where the transaction resumes, never sent again: owed (a
            # run's own rollback to a step never leaves the block open, so a rewind did it).
            if not a.live and a.step_id >= info.next_step_id and a.step_id not in live:
                self.ledger.owed.setdefault(a.step_id, a.tool_name)
        self.replay = Replay(info.steps, info.revision)

    async def end(self, exc: BaseException | None) -> None:
        """Commit after a clean run; roll back after one that raised, or that left steps
        owed, or whose commit was refused (the block is all or nothing)."""
        if self.status is None or self.ended:
            return
        if exc is not None:
            await self._abort(exc)
            return
        owed = self.ledger.to_redo()
        if owed:
            error = StepsOwed(self.transaction_id, owed)
            await self._abort(error)
            raise error
        try:
            await self.commit()
        except AgentTxError as refused:
            if not self.ended:
                await self._abort(refused)
            raise

    async def commit(self) -> CommitResult:
        """Commit now; after an approval, exactly the change that was approved."""
        self._check_open("commit")
        p = self.approved
        r = await self.service.commit(
            self.transaction_id,
            receipt_id=p.receipt_id if p else "",
            expected_revision=p.revision if p else None,
        )
        self.result, self.status, self.next_step_id = r, r.transaction_status, 0
        return r

    async def _abort(self, cause: BaseException) -> None:
        """Roll back because of ``cause``, which the caller is about to see raised."""
        reason = f"aborted by the agent run on {type(cause).__name__}: {cause}"[:240]
        try:
            r = await self.service.rollback(self.transaction_id, None, reason)
        except AgentTxError as abort_error:
            # The run's own error is what the caller needs to see; say the abort failed.
            cause.add_note(f"agenttx: rolling back {self.transaction_id} failed: {abort_error}")
            return
        self.status, self.next_step_id = r.transaction_status, r.next_step_id

    # ------------------------------------------------------------------ steps

    @property
    def ended(self) -> bool:
        return self.status is not None and self.status.terminal

    def to_redo(self) -> dict[int, str]:
        """The steps a rewind undid that were not sent again: step id -> tool."""
        return self.ledger.to_redo()

    def shown(self, tool: str) -> str:
        """The name the model knows ``tool`` by (itself when it was not wrapped here)."""
        return self.names.provider(tool) if self.names.named(tool) else tool

    def _shown_steps(self, steps: Mapping[int, str]) -> dict[int, str]:
        return {step_id: self.shown(tool) for step_id, tool in steps.items()}

    def system_prompt(self) -> str:
        """The constraints so far as a system-prompt fragment ("" when there are none)."""
        return constraints_prompt(self.constraints)

    async def call(
        self, tool: str, arguments: Any = None, raw_context: str = "", *, call_id: str = ""
    ) -> CallOutcome:
        """Send ``tool(arguments)`` as the next step. A failure the transaction survives (a
        rewind) is the outcome's ``failure``; one that ends it raises ``TransactionAborted``,
        an outside call of unknown outcome ``OutcomeUnknown``. A ``call_id`` of the message
        ``expect`` named waits for the calls before it, and is not sent after one of them
        rewound the transaction."""
        if not call_id or not self.order.holds(call_id):
            async with self._turn:
                return await self._send(tool, arguments, raw_context, call_id)
        await self.order.wait_turn(call_id)
        try:
            if self.rewinds != self._message_rewinds and self.last_failure is not None:
                return CallOutcome(failure=self.not_sent(self.shown(tool)))
            async with self._turn:
                return await self._send(tool, arguments, raw_context, call_id)
        finally:
            await self.order.finish(call_id)

    def expect(self, call_ids: Sequence[str]) -> None:
        """A model message holds these calls, in this order: ``call(..., call_id=)`` sends
        them so, however they are scheduled (``skip`` through ``order`` one that will not
        run)."""
        self.order.expect(call_ids)
        self._message_rewinds = self.rewinds

    async def in_order(
        self,
        calls: Sequence[Call],
        send: Callable[[Call], Awaitable[Reply]],
        not_sent: Callable[[Call, FailedCall], Reply],
        tool_of: Callable[[Call], str],
        since: int | None = None,
    ) -> list[Reply]:
        """The calls of one model message, one after another in the message's order
        (``send`` makes each one's reply; it calls ``call``). After a call rewinds the
        transaction the rest are not sent: ``not_sent`` makes their replies, saying so.
        ``since`` is ``rewinds`` when the message arrived (default: now): a framework that
        is handed a message's calls one at a time passes it with each."""
        mark = self.rewinds if since is None else since
        replies: list[Reply] = []
        for c in calls:
            if self.rewinds != mark and self.last_failure is not None:
                replies.append(not_sent(c, self.not_sent(tool_of(c))))
                continue
            replies.append(await send(c))
        return replies

    def not_sent(self, tool: str) -> FailedCall:
        """Why ``tool``, called in the same model message after a call that rewound the
        transaction (``last_failure``), is not sent: for a framework that hands the calls of
        a message over one at a time, not as the list ``in_order`` takes."""
        first = self.last_failure
        assert first is not None  # callers check it (in_order does)
        return FailedCall(
            tool=tool,
            step_id=0,
            hint="",
            resume_at=self.next_step_id,
            owed=self._shown_steps(self.ledger.to_redo()),
            constraints=tuple(self.constraints),
            after=(first.tool, first.step_id),
        )

    async def _send(
        self, tool: str, arguments: Any, raw_context: str, call_id: str = ""
    ) -> CallOutcome:
        self._check_open("take a step")
        args = arguments if arguments is not None else {}
        rid = self.request_ids.of(self.transaction_id, call_id)
        step = self.service.execute_step
        try:
            r = await step(
                self.transaction_id, self.next_step_id, tool, args, raw_context, request_id=rid
            )
        except AlreadyExists:
            # The call id was sent before as another step: after a resume, the call made
            # again (its stored reply is found at that step); else an id the model repeated.
            replayed = await self._stored_reply(tool, args, raw_context, rid)
            if replayed is not None:
                return self._replayed(tool, replayed)
            r = await step(self.transaction_id, self.next_step_id, tool, args, raw_context)
        if self.replay is not None:
            if self.replay.active and self.replay.stored(r):
                return self._replayed(tool, r)
            self.replay.active = False  # the first new call: the run is new from here
        self.next_step_id, self.status = r.next_step_id, r.transaction_status
        self.constraints = list(r.constraints)
        self.pending_preview = None  # any step moves the revision: a preview is stale
        return self._outcome(tool, r)

    async def _stored_reply(
        self, tool: str, args: Any, raw_context: str, rid: str
    ) -> StepResult | None:
        """The reply stored for request ``rid`` at one of the recorded steps of ``tool``, if
        the run resumed and it is there. Nothing can run: none of these is the next step."""
        if self.replay is None or not self.replay.active:
            return None
        for step_id in self.replay.candidates(tool, self.next_step_id):
            try:
                r = await self.service.execute_step(
                    self.transaction_id, step_id, tool, args, raw_context, request_id=rid
                )
            except (AlreadyExists, FailedPrecondition):  # another step's id, or none stored
                continue
            return r
        return None

    def _replayed(self, tool: str, r: StepResult) -> CallOutcome:
        """The outcome of a call made again after a resume, from its stored reply ``r``: what
        the call got then; the transaction stays where it is."""
        if self.replay is not None:
            self.replay.last = r.step_id
        self.replayed += 1
        return self._outcome(tool, r, replayed=True)

    def _outcome(self, tool: str, r: StepResult, *, replayed: bool = False) -> CallOutcome:
        """What the call ``tool`` got, from the service's reply ``r`` (the transaction's state
        already taken from it). A replayed reply changes nothing that stands or is owed; its
        failure is the one the model read then, and the rest of its message was not sent then
        either (``in_order`` stops at a new rewind)."""
        if r.status is StepStatus.SUCCESS:
            if not replayed:
                self.ledger.succeeded(r.step_id, tool, r.output)
            return CallOutcome(output=r.output, result=r, replayed=replayed)
        if r.status is StepStatus.ROLLBACK_TRIGGERED:
            undone = {} if replayed else self.ledger.rewound(r.next_step_id)
            self.rewinds += 1
            failure = FailedCall(
                tool=self.shown(tool),
                step_id=r.step_id,
                hint=r.clean_hint,
                resume_at=self.next_step_id,
                undone=self._shown_steps(undone),
                owed=self._shown_steps(self.ledger.to_redo()),
                constraints=tuple(self.constraints),
                context_reset=r.context_reset,
            )
            self.last_failure = failure
            return CallOutcome(failure=failure, result=r, replayed=replayed)
        if r.status is StepStatus.FAILED:
            raise TransactionAborted(r)
        raise OutcomeUnknown(r)

    def _check_open(self, action: str) -> None:
        if self.status is None:
            raise FailedPrecondition(
                "the transaction was not begun: use it as `async with transaction(...) as tx`"
            )
        if self.ended:
            raise NotActive(self.transaction_id, self.status.value, action)

    # ------------------------------------------------------------------ the service's tools

    async def tools(self) -> dict[str, ToolSpec]:
        """The service's tools by AgentTx name, listed once per transaction."""
        if self._tools is None:
            self._tools = await listed_tools(self.service)
        return self._tools

    async def require(self, names: Sequence[str]) -> dict[str, ToolSpec]:
        """The service's tools, after checking it has each of ``names`` (else a
        ``FailedPrecondition`` saying where the tools must be loaded)."""
        listed = await self.tools()
        missing = [n for n in names if n not in listed]
        if missing:
            raise tools_not_loaded(missing, listed)
        return listed

    # ------------------------------------------------------------------ approval

    async def preview(self) -> Preview:
        """The change a commit would make now and its receipt: the one already shown to a
        person while nothing changed since, else a new one."""
        self._check_open("preview a commit")
        if self.pending_preview is None:
            self.pending_preview = await self.service.preview_commit(self.transaction_id)
        return self.pending_preview

    async def approve(self, principal: str, roles: Sequence[str] = APPROVER) -> Approval:
        """``principal`` approves the pending preview: the commit will name its receipt."""
        p = self._pending("approve")
        a = await self.service.approve_commit(
            self.transaction_id, p.receipt_id, principal=principal, roles=roles
        )
        self.approved, self.pending_preview = p, None
        return a

    async def refuse(self, principal: str, reason: str, roles: Sequence[str] = APPROVER) -> Refusal:
        """``principal`` refuses the pending preview, saying why; the transaction stays open
        to be changed and shown again."""
        p = self._pending("refuse")
        r = await self.service.refuse_commit(
            self.transaction_id, p.receipt_id, reason, principal=principal, roles=roles
        )
        self.refusals.append(r)
        self.pending_preview = None
        return r

    def _pending(self, action: str) -> Preview:
        if self.pending_preview is None:
            raise FailedPrecondition(
                f"nothing to {action}: no preview is waiting for a decision (preview first; "
                "a step since the last preview made it stale)"
            )
        return self.pending_preview
