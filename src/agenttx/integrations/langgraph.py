"""LangGraph and LangChain tools as AgentTx steps (``pip install 'agenttx[langgraph]'``).

    async with agenttx.integrations.langgraph.transaction(engine, agent_id="billing") as tx:
        tools = await tx.tools()                 # every tool the service has, for the model
        graph = build(model.bind_tools(tools), await tx.tool_node(tools))
        await graph.ainvoke({"messages": [...]})
    tx.result                                    # the commit's reply

Where the tool code runs: in the engine. ``as_agenttx_tools`` turns LangChain tools into
``agenttx.Tool``s for ``Engine.open(tools=...)`` or ``agenttx serve --tools``; inside a
transaction ``tx.tools(...)`` gives LangChain tools of the same names whose call is the next
step of the transaction. The transaction itself (begin, steps in order, the owed-steps rule,
commit or rollback, approval) is ``agenttx.integrations.AgentTransaction``; this module only
turns its outcomes into LangChain's and LangGraph's own shapes: a failed step is a
``ToolMessage`` with ``status="error"``, the calls of one ``AIMessage`` run in the message's
order (``TransactionToolNode``), approval waits in LangGraph's ``interrupt``. docs/integrations.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from types import TracebackType
from typing import Any

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
    from langchain_core.tools import tool as as_langchain_tool
    from langgraph.graph import END
    from langgraph.types import Command, interrupt
except ImportError as missing:  # the extra is not installed: say which one, at once
    raise ImportError(
        "agenttx.integrations.langgraph needs LangGraph and LangChain, which are not "
        f"installed ({missing}); install them with: pip install 'agenttx[langgraph]'"
    ) from missing

from pydantic import BaseModel

from agenttx.errors import InvalidArgument
from agenttx.integrations._catalog import ToolSpec
from agenttx.integrations._failure import FailedCall, refusal_text
from agenttx.integrations._transaction import APPROVER, AgentTransaction
from agenttx.receipts import Preview, Refusal
from agenttx.service import TransactionService
from agenttx.tools.contract import Tool, check_tool_name
from agenttx.tools.contract import tool as agenttx_tool
from agenttx.types import CommitResult, EffectClass, RollbackPolicy, TxStatus

__all__ = [
    "DEFAULT_EFFECT",
    "LangGraphTransaction",
    "TransactionToolNode",
    "approve",
    "as_agenttx_tools",
    "refuse",
    "transaction",
]

# A framework tool nobody declared runs at its step and is taken to be irreversible: its
# effects cannot be assumed undoable, so a rewind never pretends to take them back, a crash
# during it is an unknown outcome (never a silent second run), and previews and safety
# policies see it. Declare read-only tools "read" so a rewind past them is free.
DEFAULT_EFFECT = "irreversible"
# What a framework tool can be: it cannot write AgentTx managed state (ctx.state) or stage
# an effect, so "state" and "staged" would promise an undo or a deferral that never happens.
FRAMEWORK_EFFECTS = ("read", "compensatable", "irreversible")

LangChainTool = BaseTool | Callable[..., Any]

# The id of the tool call being run, set by ``ordered_calls`` around LangGraph's ToolNode
# running it: the wrapped tool's coroutine gets only the model's arguments.
_CALL_ID: ContextVar[str] = ContextVar("agenttx_call_id", default="")


def _langchain(t: LangChainTool) -> BaseTool:
    if isinstance(t, BaseTool):
        return t
    if callable(t):
        made: BaseTool = as_langchain_tool(t)
        return made
    raise InvalidArgument(f"{t!r} is not a LangChain tool (a BaseTool, or a function)")


def _input_schema(t: BaseTool) -> dict[str, Any]:
    """The JSON schema of what the model sends ``t`` (injected arguments left out)."""
    schema = t.tool_call_schema
    if isinstance(schema, dict):
        described = dict(schema)
    elif hasattr(schema, "model_json_schema"):
        described = schema.model_json_schema()
    else:  # a pydantic.v1 model
        described = schema.schema()
    described.pop("description", None)  # the tool's description is said once, beside it
    described.setdefault("type", "object")
    return described


def _json_output(value: Any) -> Any:
    """A framework tool's output as JSON for the step (a pydantic model as its JSON form)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, BaseMessage):
        return value.content
    return value


# ---------------------------------------------------------------------- engine side


def as_agenttx_tools(
    tools: Sequence[LangChainTool],
    *,
    effects: Mapping[str, str] | None = None,
    default_effect: str = DEFAULT_EFFECT,
    undo: Mapping[str, LangChainTool] | None = None,
) -> list[Tool]:
    """LangChain tools as AgentTx tools, to load where the engine runs
    (``Engine.open(tools=...)``, ``agenttx serve --tools module:attr``).

    Each keeps its name, description and argument schema; its body calls the LangChain tool,
    whose exceptions are the step's failure. ``effects`` declares each tool's effect class by
    name (``read``, ``compensatable``, ``irreversible``), ``default_effect`` the rest. A
    ``compensatable`` tool needs ``undo[name]``: a LangChain tool called with the same
    arguments to take the call back, recorded durably before the call runs."""
    effects, undo = dict(effects or {}), dict(undo or {})
    converted = [_langchain(t) for t in tools]
    names = [t.name for t in converted]
    for given, what in ((effects, "effects"), (undo, "undo")):
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise InvalidArgument(
                f"{what} names {', '.join(map(repr, unknown))}, which "
                f"{'is' if len(unknown) == 1 else 'are'} not among the tools: {', '.join(names)}"
            )
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InvalidArgument(f"two tools are named {', '.join(map(repr, twice))}")
    return [
        _agenttx_tool(t, effects.get(t.name, default_effect), undo.get(t.name)) for t in converted
    ]


def _agenttx_tool(t: BaseTool, effect: str, undo_with: LangChainTool | None) -> Tool:
    check_tool_name(t.name)
    if effect not in FRAMEWORK_EFFECTS:
        raise InvalidArgument(
            f"tool {t.name}: effect {effect!r} is not one a LangChain tool can have; use one of "
            f"{', '.join(FRAMEWORK_EFFECTS)} (a tool that writes AgentTx state or stages an "
            "effect is an @agenttx.tool of its own)"
        )
    compensatable = effect == EffectClass.COMPENSATABLE.value
    if compensatable and undo_with is None:
        raise InvalidArgument(
            f"tool {t.name} is compensatable, so it needs an undo: pass undo={{{t.name!r}: "
            "a LangChain tool that takes the call back, given the same arguments}"
        )
    if not compensatable and undo_with is not None:
        raise InvalidArgument(f"tool {t.name} has an undo, so declare it compensatable")
    # Errors must reach the engine as exceptions, not as text the tool handled itself.
    runner = t.model_copy(update={"handle_tool_error": False, "handle_validation_error": False})

    async def run(ctx: Any, arguments: Any) -> Any:
        if compensatable:
            await ctx.register_undo(dict(arguments))  # durable before the outside call
        return _json_output(await runner.ainvoke(arguments))

    made = agenttx_tool(
        name=t.name, effect=effect, description=t.description, schema=_input_schema(t)
    )(run)
    if undo_with is not None:
        undoer = _langchain(undo_with)

        async def take_back(ctx: Any, **arguments: Any) -> None:
            await undoer.ainvoke(arguments)

        made.undo(take_back)
    return made


# ---------------------------------------------------------------------- agent side


def _content(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def _step_tool(
    core: AgentTransaction,
    agenttx_name: str,
    shown_as: str,
    description: str,
    schema: dict[str, Any],
) -> BaseTool:
    """A LangChain tool named ``shown_as`` whose call is the next step, ``agenttx_name``."""

    async def step(**arguments: Any) -> tuple[str, Any]:
        outcome = await core.call(agenttx_name, arguments, call_id=_CALL_ID.get())
        if outcome.failure is not None:
            raise ToolException(outcome.failure.text())  # a ToolMessage with status="error"
        return _content(outcome.output), outcome.output

    return StructuredTool(
        name=shown_as,
        description=description or f"AgentTx tool {agenttx_name}",
        args_schema=schema,
        coroutine=step,
        handle_tool_error=True,
        response_format="content_and_artifact",  # the output itself is the artifact
        metadata={"agenttx_tool": agenttx_name},
    )


class TransactionToolNode:
    """A LangGraph node that runs the tool calls of the last ``AIMessage`` as steps, one after
    another in the message's order, whatever the scheduler would do with concurrent tasks:
    so a replay of the same messages is the same steps. After a call that rewinds the
    transaction, the calls after it in the message are answered as not run (each call gets
    its ``ToolMessage``, as providers require). Reads and answers ``state[messages_key]``, or
    a list of messages."""

    def __init__(
        self, core: AgentTransaction, tools: Sequence[BaseTool], messages_key: str = "messages"
    ) -> None:
        self.core = core
        self.tools_by_name: dict[str, BaseTool] = {}
        for t in tools:
            if t.name in self.tools_by_name:
                raise InvalidArgument(f"two tools reach the model as {t.name!r}")
            self.tools_by_name[t.name] = t
        self.messages_key = messages_key

    async def __call__(self, state: Any, config: RunnableConfig) -> Any:
        # Annotated "RunnableConfig" exactly: LangGraph passes the run's config only then.

        messages = state if isinstance(state, list) else state[self.messages_key]
        message = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        calls = list(message.tool_calls) if message is not None else []

        async def send(call: Any) -> ToolMessage:
            t = self.tools_by_name.get(call["name"])
            if t is None:
                known = ", ".join(sorted(self.tools_by_name))
                return ToolMessage(
                    f"no tool is named {call['name']!r}; the tools are: {known}",
                    tool_call_id=call["id"],
                    name=call["name"],
                    status="error",
                )
            answer: ToolMessage = await t.ainvoke({**call, "type": "tool_call"}, config)
            return answer

        def not_sent(call: Any, failure: FailedCall) -> ToolMessage:
            return ToolMessage(
                failure.text(), tool_call_id=call["id"], name=call["name"], status="error"
            )

        answers = await self.core.in_order(calls, send, not_sent, lambda c: str(c["name"]))
        return answers if isinstance(state, list) else {self.messages_key: answers}


# ---------------------------------------------------------------------- approval


def approve(principal: str, roles: Sequence[str] = APPROVER) -> Command[Any]:
    """The resume command of a person who approves the change the interrupt showed."""
    return Command(resume={"approved": True, "principal": principal, "roles": list(roles)})


def refuse(principal: str, reason: str, roles: Sequence[str] = APPROVER) -> Command[Any]:
    """The resume command of a person who refuses it, saying why (the model reads the reason)."""
    return Command(
        resume={"approved": False, "principal": principal, "reason": reason, "roles": list(roles)}
    )


def _shown(p: Preview) -> dict[str, Any]:
    """What the interrupt shows the person: the change and its receipt, as plain data."""
    return {
        "agenttx": "approve_commit",
        "transaction_id": p.transaction_id,
        "receipt_id": p.receipt_id,
        "revision": p.revision,
        "expires_at": p.expires_at,
        "approval_reasons": list(p.approval_reasons),
        "changes": dataclasses.asdict(p.changes),
    }


def _decision(value: Any) -> tuple[bool, str, str, tuple[str, ...]]:
    if not isinstance(value, Mapping) or not isinstance(value.get("approved"), bool):
        raise InvalidArgument(
            f"resume the approval with agenttx.integrations.langgraph.approve(principal) or "
            f"refuse(principal, reason), not {value!r}"
        )
    roles = tuple(value.get("roles") or APPROVER)
    return value["approved"], str(value.get("principal", "")), str(value.get("reason", "")), roles


# ---------------------------------------------------------------------- the transaction


class LangGraphTransaction:
    """One graph run as one AgentTx transaction (made by ``transaction``)."""

    def __init__(self, core: AgentTransaction, messages_key: str = "messages") -> None:
        self.core = core  # begin, steps in order, owed steps, commit or rollback, approval
        self.messages_key = messages_key

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

    def with_constraints(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """``messages`` with the constraints so far as a system message in front (as they
        are when there are none): what to send the model on each turn."""
        prompt = self.core.system_prompt()
        return [SystemMessage(prompt), *messages] if prompt else list(messages)

    async def tools(self, framework_tools: Sequence[LangChainTool] | None = None) -> list[BaseTool]:
        """LangChain tools whose every call is the transaction's next step.

        Given LangChain tools, the same names, descriptions and schemas; the service must
        have each (loaded with ``as_agenttx_tools``), which is checked once here. Given
        nothing, every tool the service lists (built-ins such as ``kv.put`` too), named for
        the model by ``agenttx.integrations.provider_name`` (``kv.put`` → ``kv--put``)."""
        if framework_tools is not None:
            given = [_langchain(t) for t in framework_tools]
            await self.core.require([t.name for t in given])
            for t in given:  # the model calls them by their own names
                self.core.names.add(t.name, t.name)
            return [
                _step_tool(self.core, t.name, t.name, t.description, _input_schema(t))
                for t in given
            ]
        listed = await self.core.tools()
        shown = [self.core.names.add(spec.name) for spec in listed.values()]
        return [
            self._listed_tool(spec, name) for spec, name in zip(listed.values(), shown, strict=True)
        ]

    def _listed_tool(self, spec: ToolSpec, shown_as: str) -> BaseTool:
        schema = dict(spec.input_schema)
        schema.setdefault("type", "object")
        return _step_tool(self.core, spec.name, shown_as, spec.description, schema)

    async def tool_node(
        self, framework_tools: Sequence[LangChainTool] | None = None
    ) -> TransactionToolNode:
        """A node running each ``AIMessage``'s calls as steps in the message's order; its
        tools are ``tx.tools(framework_tools)`` (or, given them already, those)."""
        given = list(framework_tools) if framework_tools is not None else None
        if given is not None and all(
            isinstance(t, BaseTool) and (t.metadata or {}).get("agenttx_tool") for t in given
        ):
            tools: list[BaseTool] = [t for t in given if isinstance(t, BaseTool)]
        else:
            tools = await self.tools(given)
        return TransactionToolNode(self.core, tools, self.messages_key)

    def approval_node(self, *, agent: str, end: str = END) -> Callable[[Any], Any]:
        """A node to route to when the model has finished: it previews the commit and, when
        the change needs approval, waits in LangGraph's ``interrupt`` showing the preview.
        Resumed with ``approve(principal)`` it approves (the block's end commits exactly that
        change) and goes to ``end``; with ``refuse(principal, reason)`` it refuses, tells the
        model why and goes back to ``agent``. The graph needs a checkpointer, as every
        interrupt does."""
        core = self.core
        key = self.messages_key

        async def approval(state: Any) -> Command[Any]:
            # Run again from the top on resume: preview() gives the preview shown, unchanged.
            p = await core.preview()
            if not p.approval_required:
                return Command(goto=end)
            approved, principal, reason, roles = _decision(interrupt(_shown(p)))
            if approved:
                await core.approve(principal, roles)
                return Command(goto=end)
            r = await core.refuse(principal, reason, roles)
            told = HumanMessage(refusal_text(r.refused_by, r.reason, core.next_step_id))
            return Command(goto=agent, update={key: [told]})

        return approval

    async def ordered_calls(self, request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        """For LangGraph's own ``ToolNode(tools, awrap_tool_call=tx.ordered_calls)``: its
        concurrent calls of one ``AIMessage`` become steps in the message's order, and after a
        call that rewinds the transaction the rest are answered as not run — as in
        ``tx.tool_node``."""
        call_id = str(request.tool_call["id"])
        if not self.core.order.holds(call_id):  # the first call of a new message
            state = request.state
            messages = state if isinstance(state, list) else state[self.messages_key]
            message = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
            ids = [str(c["id"]) for c in message.tool_calls] if message is not None else []
            self.core.expect(ids if call_id in ids else [call_id])
        token = _CALL_ID.set(call_id)
        try:
            return await execute(request)
        finally:
            _CALL_ID.reset(token)
            # A call ToolNode refused before the tool ran (no such tool) must not hold up
            # the calls after it; for one that ran, this is already so.
            await self.core.order.skip(call_id)

    async def __aenter__(self) -> LangGraphTransaction:
        await self.core.begin()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.core.end(exc)


def transaction(
    service: TransactionService,
    *,
    agent_id: str = "",
    mode: str = "",
    principal: str = "",
    metadata: Mapping[str, str] | None = None,
    policy: RollbackPolicy | Mapping[str, Any] | None = None,
    isolation: str = "",
    labels: Sequence[str] = (),
    messages_key: str = "messages",
) -> LangGraphTransaction:
    """``async with transaction(service, agent_id=…, mode=…) as tx:`` begins a transaction on
    ``service`` (an ``agenttx.Engine`` or an ``agenttx.client.AsyncAgentTxClient``), commits
    it when the block ends and rolls it back when the block raises (or ends owing steps a
    rewind undid, or its commit is refused). ``tx.transaction_id``, ``tx.result`` after."""
    core = AgentTransaction(
        service,
        agent_id=agent_id,
        mode=mode,
        principal=principal,
        metadata=metadata,
        policy=policy,
        isolation=isolation,
        labels=labels,
    )
    return LangGraphTransaction(core, messages_key)
