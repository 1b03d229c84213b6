"""OpenAI Agents SDK function tools as AgentTx steps (``pip install 'agenttx[openai-agents]'``).

    async with agenttx.integrations.openai_agents.transaction(engine, agent_id="billing") as tx:
        agent = Agent(name="billing", tools=await tx.tools(), model=...)
        await Runner.run(agent, "Invoice c-1.", run_config=tx.run_config())
    tx.result                                    # the commit's reply

Where the tool code runs: in the engine. ``as_agenttx_tools`` turns function tools into
``agenttx.Tool``s for ``Engine.open(tools=...)`` or ``agenttx serve --tools``; inside a
transaction ``tx.tools(...)`` gives function tools of the same names whose invocation is the
next step. The transaction itself (begin, steps in order, the owed-steps rule, commit or
rollback, approval) is ``agenttx.integrations.AgentTransaction``; this module only turns its
outcomes into the SDK's shapes:

- a failed step is the tool's error (``StepRewound``), which the wrapped tool's
  ``failure_error_function`` turns into the output the model reads: the ``FailedCall`` text
  (hint, what was undone, where the transaction resumes), where the SDK's default would say
  only "An error occurred while running the tool";
- ``tx.run_config()`` makes the ``Runner`` run a response's calls one at a time in the
  response's order (``ToolExecutionConfig(max_function_tool_concurrency=1)``) and, before
  every model call, marks where the response was planned and puts the constraints so far into
  the instructions (``call_model_input_filter``); the wrapped tools refuse a run without it;
- approval waits in the SDK's tool approval: ``tx.approval_tool()`` needs a person's approval
  when the preview does, ``tx.approve``/``tx.refuse`` decide it on the interrupted run.

docs/integrations.md.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from agenttx.integrations._extras import missing_extra

try:
    from agents import (
        FunctionTool,
        RunConfig,
        RunContextWrapper,
        RunResult,
        RunResultStreaming,
        RunState,
        ToolApprovalItem,
        ToolExecutionConfig,
    )
    from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
    from agents.tool import (
        set_function_tool_failure_error_function,
        with_function_tool_failure_error_handler,
    )
    from agents.tool_context import ToolContext
    from agents.tracing import SpanError, get_current_span
except ImportError as missing:  # the extra is not installed: say which one, at once
    raise missing_extra(__name__, "the OpenAI Agents SDK", "openai-agents", missing) from missing

from pydantic import BaseModel

from agenttx.errors import FailedPrecondition, InvalidArgument
from agenttx.integrations._block import TransactionBlock
from agenttx.integrations._catalog import ToolSpec
from agenttx.integrations._engine_tools import DEFAULT_EFFECT, FrameworkTool, engine_tools
from agenttx.integrations._failure import FailedCall, refusal_text
from agenttx.integrations._names import NameCollision, provider_name
from agenttx.integrations._transaction import APPROVER, AgentTransaction, TransactionOptions
from agenttx.receipts import Preview
from agenttx.service import TransactionService
from agenttx.tools.contract import Tool

__all__ = [
    "APPROVAL_TOOL",
    "DEFAULT_EFFECT",
    "OpenAIAgentsTransaction",
    "StepRewound",
    "as_agenttx_tools",
    "transaction",
]

# The name the model calls to ask for the commit (``tx.approval_tool()``).
APPROVAL_TOOL = "commit_changes"
_KIND = "an Agents SDK function tool"

Interrupted = RunResult | RunResultStreaming | RunState[Any, Any]


def _function_tool(t: Any) -> FunctionTool:
    if isinstance(t, FunctionTool):
        return t
    raise InvalidArgument(
        f"{t!r} is not an Agents SDK function tool (make one with @agents.function_tool)"
    )


def _json_output(value: Any) -> Any:
    """A function tool's output as JSON for the step (a pydantic model as its JSON form)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def _content(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


class StepRewound(Exception):
    """A call that did not take effect (its step failed and was rewound, or it was not sent
    after one that was): the wrapped tool's error, which its ``failure_error_function`` turns
    into the output the model reads."""

    def __init__(self, failure: FailedCall) -> None:
        super().__init__(failure.text())
        self.failure = failure


def _failed_call_text(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """The wrapped tools' ``failure_error_function``: a rewound call's ``FailedCall`` text
    (the hint, what was undone, where the transaction resumes). Any other error is not the
    model's to handle (an aborted transaction, a run without ``tx.run_config()``): it goes on
    and ends the run."""
    if isinstance(error, StepRewound):
        return error.failure.text()
    raise error


def _mark_span(tool: FunctionTool, error: Exception, arguments: str) -> None:
    """A rewound call is an error on the tool's trace span, as the SDK marks a tool error it
    handled (steps and tool only: the hint may quote the arguments)."""
    span = get_current_span()
    if span is not None and isinstance(error, StepRewound):
        f = error.failure
        span.set_error(
            SpanError(
                message="AgentTx step rewound" if f.after is None else "AgentTx call not sent",
                data={"tool_name": tool.name, "step_id": f.step_id, "resume_at": f.resume_at},
            )
        )


def _failing_with_text(t: FunctionTool) -> FunctionTool:
    set_function_tool_failure_error_function(t, _failed_call_text)
    return t


# ---------------------------------------------------------------------- engine side


def _raising(t: FunctionTool) -> FunctionTool:
    """``t`` with the SDK's failure handling off: an exception of the tool is the step's
    failure, never a string passed off as its answer (the SDK's default would answer "An
    error occurred while running the tool")."""
    copied = copy.copy(t)  # FunctionTool rebinds its invoker to the copy
    set_function_tool_failure_error_function(copied, None)
    return copied


def _engine_run(t: FunctionTool) -> Any:
    raising = _raising(t)

    async def run(arguments: dict[str, Any]) -> Any:
        text = json.dumps(arguments)
        ctx: ToolContext[Any] = ToolContext(
            context=None, tool_name=t.name, tool_call_id=f"agenttx:{t.name}", tool_arguments=text
        )
        return _json_output(await raising.on_invoke_tool(ctx, text))

    return run


def as_agenttx_tools(
    tools: Sequence[FunctionTool],
    *,
    effects: Mapping[str, str] | None = None,
    default_effect: str = DEFAULT_EFFECT,
    undo: Mapping[str, FunctionTool] | None = None,
) -> list[Tool]:
    """Agents SDK function tools as AgentTx tools, to load where the engine runs
    (``Engine.open(tools=...)``, ``agenttx serve --tools module:attr``).

    Each keeps its name, description and JSON schema; its body invokes the function tool,
    whose exceptions are the step's failure. ``effects`` declares each tool's effect class by
    name (``read``, ``compensatable``, ``irreversible``), ``default_effect`` the rest. A
    ``compensatable`` tool needs ``undo[name]``: a function tool invoked with the same
    arguments to take the call back, recorded durably before the call runs."""
    given = [_function_tool(t) for t in tools]
    described = [
        FrameworkTool(t.name, t.description, dict(t.params_json_schema), _engine_run(t))
        for t in given
    ]
    undoers = {name: _engine_run(_function_tool(u)) for name, u in (undo or {}).items()}
    return engine_tools(
        described,
        effects=dict(effects or {}),
        default_effect=default_effect,
        undo=undoers,
        kind=_KIND,
    )


# ---------------------------------------------------------------------- the run's order


class _ModelTurns:
    """The ``call_model_input_filter`` of ``tx.run_config()``: runs before every model call,
    so it knows where each response is planned (the rewind count then) and puts the
    constraints so far into the instructions. Its presence in a run's config is also how a
    wrapped tool knows the run sends a response's calls one at a time, in order."""

    def __init__(self, tx: OpenAIAgentsTransaction, inner: CallModelInputFilter | None) -> None:
        self.tx = tx
        self.inner = inner  # the caller's own filter, run first

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        given = data.model_data
        if self.inner is not None:
            got = self.inner(data)
            given = await got if inspect.isawaitable(got) else got
        self.tx.planned_at = self.tx.core.rewinds
        prompt = self.tx.core.system_prompt()
        if not prompt:
            return given
        instructions = "\n\n".join(p for p in (given.instructions, prompt) if p)
        return ModelInputData(input=given.input, instructions=instructions)


# ---------------------------------------------------------------------- the transaction


class OpenAIAgentsTransaction(TransactionBlock):
    """One Agents SDK run (and its resumptions) as one AgentTx transaction (made by
    ``transaction``)."""

    def __init__(self, core: AgentTransaction) -> None:
        super().__init__(core)
        # ``core.rewinds`` when the model was last called: the calls of its response after
        # one that rewinds are not sent (they were planned on steps that no longer stand).
        self.planned_at = 0
        self.approval_tool_name: str | None = None  # once approval_tool() made it
        self.asked: Preview | None = None  # the preview the last approval interruption showed

    # ------------------------------------------------------------------ what it holds

    @property
    def pending_preview(self) -> Preview | None:
        """The change a person is asked to approve (``None`` when nobody is being asked)."""
        return self.core.pending_preview

    # ------------------------------------------------------------------ the run

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """``base`` (default: ``RunConfig()``) for ``Runner.run(..., run_config=...)``: a
        response's function calls run one at a time in the response's order, and the
        constraints reach the model's instructions before every model call."""
        base = base if base is not None else RunConfig()
        ordered = dataclasses.replace(
            base.tool_execution or ToolExecutionConfig(), max_function_tool_concurrency=1
        )
        inner = base.call_model_input_filter
        if isinstance(inner, _ModelTurns):
            inner = inner.inner  # made by run_config already: filter once
        return dataclasses.replace(
            base, tool_execution=ordered, call_model_input_filter=_ModelTurns(self, inner)
        )

    def _check_ordered(self, ctx: ToolContext[Any], shown_as: str) -> None:
        config = ctx.run_config
        turns = config.call_model_input_filter if config is not None else None
        execution = config.tool_execution if config is not None else None
        if (
            isinstance(turns, _ModelTurns)
            and turns.tx is self
            and execution is not None
            and execution.max_function_tool_concurrency == 1
        ):
            return
        raise FailedPrecondition(
            f"{shown_as} is a step of AgentTx transaction {self.transaction_id}: run the agent "
            "with Runner.run(..., run_config=tx.run_config()) so a response's calls are steps "
            "one at a time, in the response's order"
        )

    # ------------------------------------------------------------------ tools

    async def tools(
        self, function_tools: Sequence[FunctionTool] | None = None
    ) -> list[FunctionTool]:
        """Function tools whose every invocation is the transaction's next step.

        Given function tools, the same names, descriptions, schemas, approval policies
        (``needs_approval``) and guardrails; the service must have each (loaded with
        ``as_agenttx_tools``), which is checked once here. Given nothing, every tool the
        service lists (built-ins such as ``kv.put`` too), named for the model by
        ``agenttx.integrations.provider_name`` (``kv.put`` → ``kv--put``)."""
        if function_tools is not None:
            given = [_function_tool(t) for t in function_tools]
            await self.core.require([t.name for t in given])
            for t in given:  # the model calls them by their own names
                self._name(t.name, t.name)
            return [self._wrapped(t) for t in given]
        listed = await self.core.tools()
        return [self._listed(spec, self._name(spec.name)) for spec in listed.values()]

    def _name(self, tool: str, provider: str | None = None) -> str:
        shown = provider if provider is not None else provider_name(tool)
        if shown == self.approval_tool_name:
            raise NameCollision(
                f"tool {tool!r} would reach the model as {shown!r}, the approval tool"
            )
        return self.core.names.add(tool, shown)

    def _wrapped(self, t: FunctionTool) -> FunctionTool:
        return _failing_with_text(
            FunctionTool(
                name=t.name,
                description=t.description,
                params_json_schema=dict(t.params_json_schema),
                on_invoke_tool=self._invoker(t.name, t.name),
                strict_json_schema=t.strict_json_schema,
                is_enabled=t.is_enabled,
                tool_input_guardrails=t.tool_input_guardrails,
                tool_output_guardrails=t.tool_output_guardrails,
                needs_approval=t.needs_approval,
            )
        )

    def _listed(self, spec: ToolSpec, shown_as: str) -> FunctionTool:
        schema = dict(spec.input_schema)
        schema.setdefault("type", "object")
        return _failing_with_text(
            FunctionTool(
                name=shown_as,
                description=spec.description or f"AgentTx tool {spec.name}",
                params_json_schema=schema,
                on_invoke_tool=self._invoker(spec.name, shown_as),
                # The service's schemas allow any JSON where a tool takes any (kv.put's
                # value): strict mode would forbid that; the engine validates the arguments.
                strict_json_schema=False,
            )
        )

    def _invoker(self, agenttx_name: str, shown_as: str) -> Any:
        core = self.core

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            self._check_ordered(ctx, shown_as)
            try:
                parsed = json.loads(arguments) if arguments else {}
            except json.JSONDecodeError as e:
                parsed = e
            if not isinstance(parsed, dict):
                return (
                    f"AgentTx: the arguments of {shown_as} are not a JSON object "
                    f"({parsed}); nothing was sent. Call it again with an object."
                )

            async def send(_: str) -> str:
                outcome = await core.call(agenttx_name, parsed, call_id=ctx.tool_call_id)
                if outcome.failure is not None:
                    raise StepRewound(outcome.failure)
                return _content(outcome.output)

            def not_sent(_: str, failure: FailedCall) -> str:
                raise StepRewound(failure)

            [reply] = await core.in_order(
                [shown_as], send, not_sent, lambda c: c, since=self.planned_at
            )
            return reply

        return with_function_tool_failure_error_handler(invoke, _mark_span)

    # ------------------------------------------------------------------ approval

    def approval_tool(self, name: str = APPROVAL_TOOL) -> FunctionTool:
        """The tool the model calls when its change is complete, to ask for the commit. When
        the preview needs a person's approval (``mode="approval_required"``), the SDK
        interrupts the run there (``RunResult.interruptions``) with ``tx.pending_preview``
        as what the person decides on; ``tx.approve`` / ``tx.refuse`` decide, and the run
        resumes from the returned state. In other modes the call answers at once."""
        if name in self.core.names:
            raise NameCollision(f"a wrapped tool already reaches the model as {name!r}")
        self.approval_tool_name = name
        core = self.core

        async def needs_approval(ctx: RunContextWrapper[Any], params: Any, call_id: str) -> bool:
            preview = await core.preview()  # the one shown already, while nothing changed
            self.asked = preview if preview.approval_required else None
            return preview.approval_required

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            asked = self.asked
            if asked is None:
                return (
                    "AgentTx: nothing here needs a person's approval; the change is committed "
                    "when the run ends. Finish now."
                )
            if core.approved is not asked:
                raise FailedPrecondition(
                    "the commit was approved in the run but not in AgentTx: decide with "
                    "tx.approve(result, principal) or tx.refuse(result, principal, reason), "
                    "not RunState.approve"
                )
            return (
                f"AgentTx: the change was approved (receipt {asked.receipt_id}); it is "
                "committed when the run ends. Make no further tool calls: finish now."
            )

        return FunctionTool(
            name=name,
            description=(
                "Call this once the task's changes are complete, to ask for them to be "
                "committed. A person may have to approve them first; if they refuse, the "
                "answer says why, and you change the work and call this again."
            ),
            params_json_schema={"type": "object", "properties": {}, "required": []},
            on_invoke_tool=invoke,
            needs_approval=needs_approval,
        )

    def _waiting(self, run: Interrupted) -> tuple[RunState[Any, Any], ToolApprovalItem]:
        state = run if isinstance(run, RunState) else run.to_state()
        waiting = [
            item
            for item in state.get_interruptions()
            if self.approval_tool_name is not None and item.tool_name == self.approval_tool_name
        ]
        if not waiting or self.core.pending_preview is None:
            raise FailedPrecondition(
                "no commit approval is waiting in this run: give the agent tx.approval_tool() "
                "and decide when the run is interrupted at it"
            )
        return state, waiting[-1]

    async def approve(
        self, run: Interrupted, principal: str, roles: Sequence[str] = APPROVER
    ) -> RunState[Any, Any]:
        """``principal`` approves the change shown (``tx.pending_preview``): the block's end
        commits exactly that change. Answers the run's state to resume
        (``Runner.run(agent, state, run_config=tx.run_config())``)."""
        state, item = self._waiting(run)
        await self.core.approve(principal, roles)
        state.approve(item)
        return state

    async def refuse(
        self, run: Interrupted, principal: str, reason: str, roles: Sequence[str] = APPROVER
    ) -> RunState[Any, Any]:
        """``principal`` refuses the change shown, saying why: on resumption the model reads
        the refusal as the approval tool's output and may change the transaction and ask
        again. Answers the run's state to resume."""
        state, item = self._waiting(run)
        r = await self.core.refuse(principal, reason, roles)
        state.reject(
            item, rejection_message=refusal_text(r.refused_by, r.reason, self.core.next_step_id)
        )
        return state


def transaction(
    service: TransactionService, **options: Unpack[TransactionOptions]
) -> OpenAIAgentsTransaction:
    """``async with transaction(service, agent_id=…, mode=…) as tx:`` one Agents SDK run (and
    its resumptions) as one transaction on ``service`` (an ``agenttx.Engine`` or an
    ``AsyncAgentTxClient``), with the block's rules of ``TransactionBlock``."""
    return OpenAIAgentsTransaction(AgentTransaction(service, **options))
