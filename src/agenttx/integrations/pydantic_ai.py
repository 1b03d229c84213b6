"""pydantic-ai toolsets as AgentTx steps (``pip install 'agenttx[pydantic-ai]'``).

    async with agenttx.integrations.pydantic_ai.transaction(engine, agent_id="billing") as tx:
        result = await agent.run("Invoice c-1.", toolsets=[tx.toolset()])
    tx.result                                    # the commit's reply

Where the tool code runs: in the engine. ``as_agenttx_tools`` turns pydantic-ai tools (a
``FunctionToolset``, ``Tool``s, plain functions) into ``agenttx.Tool``s for
``Engine.open(tools=...)`` or ``agenttx serve --tools``; inside a transaction
``tx.toolset(toolset)`` wraps a toolset (a ``FunctionToolset``, an MCP toolset whose server the
engine's gateway serves) so that each call is the next step of the transaction instead of a
call of the wrapped tool. The transaction itself is ``agenttx.integrations.AgentTransaction``;
this module only turns its outcomes into pydantic-ai's shapes: a failed step is a
``ModelRetry``, the calls of one model response run one after another in the response's order
(every wrapped tool is ``sequential``), the constraints are the toolset's instructions, and
approval is a deferred tool call (``ApprovalRequired``). docs/integrations.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Unpack, cast

from agenttx.integrations._extras import missing_extra

try:
    from pydantic_ai import RunContext
    from pydantic_ai.exceptions import ApprovalRequired as CallNeedsApproval
    from pydantic_ai.exceptions import ModelRetry, ToolFailed
    from pydantic_ai.tools import (
        DeferredToolRequests,
        DeferredToolResults,
        Tool,
        ToolDefinition,
        ToolDenied,
    )
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset
except ImportError as missing:  # the extra is not installed: say which one, at once
    raise missing_extra(__name__, "pydantic-ai", "pydantic-ai", missing) from missing

from pydantic_core import SchemaValidator, core_schema, to_jsonable_python

from agenttx.errors import FailedPrecondition, InvalidArgument
from agenttx.integrations._block import TransactionBlock, preview_shown
from agenttx.integrations._catalog import ToolSpec
from agenttx.integrations._engine_tools import DEFAULT_EFFECT, FrameworkTool, engine_tools
from agenttx.integrations._failure import refusal_text
from agenttx.integrations._transaction import APPROVER, AgentTransaction, TransactionOptions
from agenttx.service import TransactionService
from agenttx.tools.contract import Tool as AgentTxTool

__all__ = [
    "APPROVAL_TOOL",
    "DEFAULT_EFFECT",
    "PydanticAITransaction",
    "ServiceToolset",
    "TransactionToolset",
    "as_agenttx_tools",
    "transaction",
]

# The tool the model calls, in approval_required mode, to ask a person to approve the change
# (shown as provider_name(APPROVAL_TOOL)). Not a tool of the service: it previews the commit.
APPROVAL_TOOL = "agenttx.request_approval"
_KIND = "a pydantic-ai tool"
# The service validates a step's arguments against the tool's schema; the agent side takes any
# object, as pydantic-ai's own MCP toolset does.
_ANY_ARGUMENTS = SchemaValidator(
    core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema())
)

PydanticTool = Tool[Any] | Callable[..., Any]


def _pydantic(t: PydanticTool) -> Tool[Any]:
    if isinstance(t, Tool):
        return t
    if callable(t):
        return Tool(t)
    raise InvalidArgument(f"{t!r} is not a pydantic-ai tool (a Tool, or a function)")


def _listed(tools: FunctionToolset[Any] | Sequence[PydanticTool]) -> list[Tool[Any]]:
    if isinstance(tools, FunctionToolset):
        return list(tools.tools.values())
    return [_pydantic(t) for t in tools]


# ---------------------------------------------------------------------- engine side


def as_agenttx_tools(
    tools: FunctionToolset[Any] | Sequence[PydanticTool],
    *,
    effects: Mapping[str, str] | None = None,
    default_effect: str = DEFAULT_EFFECT,
    undo: Mapping[str, PydanticTool] | None = None,
) -> list[AgentTxTool]:
    """pydantic-ai tools (a ``FunctionToolset``, ``Tool``s or plain functions) as AgentTx
    tools, to load where the engine runs (``Engine.open(tools=...)``, ``agenttx serve --tools
    module:attr``).

    Each keeps its name, description and argument schema; its body validates the arguments as
    pydantic-ai would and calls the function, whose exceptions (``ModelRetry`` too) are the
    step's failure. ``effects`` declares each tool's effect class by name (``read``,
    ``compensatable``, ``irreversible``), ``default_effect`` the rest. A ``compensatable`` tool
    needs ``undo[name]``: a tool called with the same arguments to take the call back, recorded
    durably before the call runs. A tool that takes a ``RunContext`` is refused: the engine runs
    it outside any agent run, so there is no context to give it."""
    described = [
        FrameworkTool(t.name, t.description or "", t.function_schema.json_schema, _engine_run(t))
        for t in _listed(tools)
    ]
    return engine_tools(
        described,
        effects=dict(effects or {}),
        default_effect=default_effect,
        undo={name: _engine_run(_pydantic(u)) for name, u in (undo or {}).items()},
        kind=_KIND,
    )


def _without_context(t: Tool[Any]) -> Tool[Any]:
    if t.takes_ctx:
        raise InvalidArgument(
            f"tool {t.name} takes a RunContext, which it cannot have where the engine runs it "
            "(outside any agent run); take what it needs as arguments instead"
        )
    return t


def _engine_run(t: Tool[Any]) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    """Runs ``t`` on a step's arguments as pydantic-ai would (validated by its own schema);
    its exception (``ModelRetry`` too) is the step's failure."""
    schema = _without_context(t).function_schema

    async def run(arguments: dict[str, Any]) -> Any:
        validated = schema.validator.validate_python(arguments)
        # The schema asks for a context only when the tool takes one, which was refused above.
        output = await schema.call(validated, cast(RunContext[Any], None))
        return to_jsonable_python(output)

    return run


# ---------------------------------------------------------------------- agent side


def _approval_definition(shown_as: str) -> ToolDefinition:
    return ToolDefinition(
        name=shown_as,
        description=(
            "Ask a person to approve the change this transaction would commit. Call it when the "
            "work is done, alone in its response; finish once it says the change was approved."
        ),
        parameters_json_schema={"type": "object", "properties": {}},
        sequential=True,
    )


@dataclass
class _Steps:
    """Sends a call of the model as the next step, as pydantic-ai expects a tool to answer.

    ``response`` is the model response whose calls are being run (its run and run step) and
    ``mark`` the transaction's rewinds when its first call was sent: a call of the same
    response after a rewind is not sent. Every toolset of one transaction shares one."""

    core: AgentTransaction
    response: tuple[str | None, int] | None = None
    mark: int = 0

    def check_planned(self, shown_as: str, ctx: RunContext[Any]) -> None:
        """Refuse the call ``shown_as`` when an earlier call of its response rewound the
        transaction: it was planned on steps that no longer stand."""
        core = self.core
        response = (ctx.run_id, ctx.run_step)
        if response != self.response:
            self.response, self.mark = response, core.rewinds
        if core.rewinds != self.mark and core.last_failure is not None:
            # Not the model's mistake: ToolFailed spends none of the tool's retries.
            raise ToolFailed(core.not_sent(shown_as).text())

    async def send(self, tool: str, shown_as: str, arguments: Any, ctx: RunContext[Any]) -> Any:
        self.check_planned(shown_as, ctx)
        outcome = await self.core.call(
            tool, to_jsonable_python(arguments), call_id=ctx.tool_call_id or ""
        )
        if outcome.failure is not None:
            # pydantic-ai's own retry: one retry of this tool (its max_retries), the model
            # reads the hint, the undone steps and where the transaction resumes.
            raise ModelRetry(outcome.failure.text())
        return outcome.output


def _sequential(
    t: ToolsetTool[Any], toolset: AbstractToolset[Any], retries: int | None
) -> ToolsetTool[Any]:
    """``t`` offered by ``toolset``, run alone (pydantic-ai then runs a response's calls one
    after another in the response's order, so a replay is the same steps)."""
    return replace(
        t,
        toolset=toolset,
        tool_def=replace(t.tool_def, sequential=True),
        max_retries=t.max_retries if retries is None else retries,
    )


@dataclass
class _Voice:
    """What a transaction says to the model besides its tools: the constraints so far as
    instructions, and in approval_required mode the tool that asks a person to approve. Only
    the first toolset a transaction makes carries it, so two toolsets never say it twice."""

    steps: _Steps
    approval: bool  # true iff the transaction's mode is approval_required

    @property
    def core(self) -> AgentTransaction:
        return self.steps.core

    def instructions(self) -> str | None:
        parts = [self.core.system_prompt()]
        if self.approval:
            parts.append(
                f"Before you finish, call {self.core.shown(APPROVAL_TOOL)}: a person approves "
                "the change before it commits."
            )
        return "\n\n".join(p for p in parts if p) or None

    def tools(
        self, toolset: AbstractToolset[Any], ctx: RunContext[Any]
    ) -> dict[str, ToolsetTool[Any]]:
        if not self.approval:
            return {}
        shown_as = self.core.names.add(APPROVAL_TOOL)
        return {
            shown_as: ToolsetTool[Any](
                toolset=toolset,
                tool_def=_approval_definition(shown_as),
                max_retries=ctx.max_retries,
                args_validator=_ANY_ARGUMENTS,
            )
        }

    async def request_approval(self, ctx: RunContext[Any]) -> str:
        core = self.core
        self.steps.check_planned(core.shown(APPROVAL_TOOL), ctx)
        if ctx.tool_call_approved:  # the person approved: PydanticAITransaction.approve did
            if core.approved is None:
                raise FailedPrecondition(
                    "the approval was not given through the transaction: answer the deferred "
                    "call with `await tx.approve(requests, principal)`"
                )
            return (
                "AgentTx: the change was approved; it commits when you finish. Make no more "
                "tool calls: any step changes it, and the approval would no longer hold."
            )
        p = await core.preview()
        if not p.approval_required:
            return "AgentTx: this change needs no approval; it commits when you finish."
        raise CallNeedsApproval(metadata=preview_shown(p))


@dataclass
class TransactionToolset(WrapperToolset[Any]):
    """A toolset whose every call is the transaction's next step: the wrapped toolset's tools
    (names, descriptions, schemas, argument validation) offered as they are, each call sent to
    the service as the tool ``server.name`` (``name`` when ``server`` is empty) instead of
    called here. Made by ``PydanticAITransaction.toolset``."""

    steps: _Steps = field(kw_only=True)
    voice: _Voice | None = field(default=None, kw_only=True)  # set on the first toolset only
    server: str = field(default="", kw_only=True)  # the gateway server serving the tools
    max_retries: int | None = field(default=None, kw_only=True)  # None: each tool's own
    checked: bool = field(default=False, kw_only=True)  # true once the service was asked

    def service_tool(self, shown_as: str) -> str:
        return f"{self.server}.{shown_as}" if self.server else shown_as

    async def get_instructions(self, ctx: RunContext[Any]) -> Any:
        wrapped = await super().get_instructions(ctx)
        ours = self.voice.instructions() if self.voice is not None else None
        if not ours:
            return wrapped
        if wrapped is None:
            return ours
        return [*wrapped, ours] if isinstance(wrapped, list) else [wrapped, ours]

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        if not self.checked:  # the service must have each tool: said at the first listing
            await self.steps.core.require([self.service_tool(n) for n in tools])
            self.checked = True
        for shown_as in tools:
            self.steps.core.names.add(self.service_tool(shown_as), shown_as)
        offered = {n: _sequential(t, self, self.max_retries) for n, t in tools.items()}
        if self.voice is not None:
            offered.update(self.voice.tools(self, ctx))
        return offered

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if self.voice is not None and name == self.steps.core.shown(APPROVAL_TOOL):
            return await self.voice.request_approval(ctx)
        return await self.steps.send(self.service_tool(name), name, tool_args, ctx)


@dataclass
class ServiceToolset(AbstractToolset[Any]):
    """Every tool the service lists (built-ins such as ``kv.put`` too) as a toolset, named for
    the model by ``agenttx.integrations.provider_name`` (``kv.put`` → ``kv--put``); each call
    is the transaction's next step. Made by ``PydanticAITransaction.toolset()``."""

    steps: _Steps
    voice: _Voice | None = None
    max_retries: int | None = None  # None: the agent's tool retries

    @property
    def id(self) -> str | None:
        return None

    async def get_instructions(self, ctx: RunContext[Any]) -> str | None:
        return self.voice.instructions() if self.voice is not None else None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        listed = await self.steps.core.tools()
        retries = ctx.max_retries if self.max_retries is None else self.max_retries
        offered: dict[str, ToolsetTool[Any]] = {}
        for spec in listed.values():
            shown_as = self.steps.core.names.add(spec.name)
            offered[shown_as] = ToolsetTool[Any](
                toolset=self,
                tool_def=self._definition(spec, shown_as),
                max_retries=retries,
                args_validator=_ANY_ARGUMENTS,
            )
        if self.voice is not None:
            offered.update(self.voice.tools(self, ctx))
        return offered

    @staticmethod
    def _definition(spec: ToolSpec, shown_as: str) -> ToolDefinition:
        schema = dict(spec.input_schema)
        schema.setdefault("type", "object")
        return ToolDefinition(
            name=shown_as,
            description=spec.description or f"AgentTx tool {spec.name}",
            parameters_json_schema=schema,
            sequential=True,  # a response's calls one after another, in its order
            metadata={"agenttx_tool": spec.name},
        )

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if self.voice is not None and name == self.steps.core.shown(APPROVAL_TOOL):
            return await self.voice.request_approval(ctx)
        return await self.steps.send(self.steps.core.names.tool(name), name, tool_args, ctx)


# ---------------------------------------------------------------------- the transaction


class PydanticAITransaction(TransactionBlock):
    """One agent run (or several: a run, a person's decision, the resumed run) as one AgentTx
    transaction (made by ``transaction``). The toolsets give the model the constraints as
    instructions; ``system_prompt()`` is the same text for a prompt of your own."""

    def __init__(self, core: AgentTransaction, *, approval: bool) -> None:
        super().__init__(core)
        self._steps = _Steps(core)  # shared by every toolset of this transaction
        self._voice: _Voice | None = _Voice(self._steps, approval)  # handed to the first toolset

    def toolset(
        self,
        toolset: AbstractToolset[Any] | None = None,
        *,
        server: str = "",
        max_retries: int | None = None,
    ) -> TransactionToolset | ServiceToolset:
        """A toolset whose every call is the transaction's next step.

        Given a toolset (a ``FunctionToolset``, an MCP toolset …), its tools as it offers them;
        the service must have each — loaded with ``as_agenttx_tools``, or, with ``server``, the
        gateway's ``server.name`` — which is checked when the agent first lists them. Given
        nothing, every tool the service lists. ``max_retries``: how many failed steps in a row
        one tool may have before the run gives up (default: the tool's own, or the agent's)."""
        voice, self._voice = self._voice, None
        if toolset is None:
            return ServiceToolset(self._steps, voice, max_retries)
        return TransactionToolset(
            toolset, steps=self._steps, voice=voice, server=server, max_retries=max_retries
        )

    # ------------------------------------------------------------------ approval

    def _asked(self, requests: DeferredToolRequests) -> str:
        shown_as = self.core.shown(APPROVAL_TOOL)
        for c in requests.approvals:
            if c.tool_name == shown_as:
                return c.tool_call_id
        raise FailedPrecondition(
            f"the run is not waiting for approval of the commit: no {shown_as} call among the "
            "deferred tool requests"
        )

    def shown(self, requests: DeferredToolRequests) -> dict[str, Any]:
        """The preview a person decides on (``transaction_id``, ``receipt_id``, ``changes`` …),
        from a run's deferred tool requests."""
        return dict(requests.metadata[self._asked(requests)])

    async def approve(
        self, requests: DeferredToolRequests, principal: str, roles: Sequence[str] = APPROVER
    ) -> DeferredToolResults:
        """``principal`` approves the change the run asked about: the block's end commits
        exactly it. Pass the answer to the next run as ``deferred_tool_results``."""
        asked = self._asked(requests)
        await self.core.approve(principal, roles)
        return DeferredToolResults(approvals={asked: True}, answered_by={asked: principal})

    async def refuse(
        self,
        requests: DeferredToolRequests,
        principal: str,
        reason: str,
        roles: Sequence[str] = APPROVER,
    ) -> DeferredToolResults:
        """``principal`` refuses it, saying why: the next run's model reads the reason as the
        call's answer (a denial) and may change the transaction and ask again."""
        asked = self._asked(requests)
        r = await self.core.refuse(principal, reason, roles)
        told = ToolDenied(refusal_text(r.refused_by, r.reason, self.core.next_step_id))
        return DeferredToolResults(approvals={asked: told}, answered_by={asked: principal})


def transaction(
    service: TransactionService, **options: Unpack[TransactionOptions]
) -> PydanticAITransaction:
    """``async with transaction(service, agent_id=…, mode=…) as tx:`` one agent run (and its
    resumptions) as one transaction on ``service`` (an ``agenttx.Engine`` or an
    ``AsyncAgentTxClient``), with the block's rules of ``TransactionBlock``; with
    ``mode="approval_required"`` its toolsets offer the model the approval tool."""
    core = AgentTransaction(service, **options)
    return PydanticAITransaction(core, approval=options.get("mode") == "approval_required")
