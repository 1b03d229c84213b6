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

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Unpack

from agenttx.integrations._extras import missing_extra

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
    raise missing_extra(__name__, "LangGraph and LangChain", "langgraph", missing) from missing

from pydantic import BaseModel

from agenttx.errors import InvalidArgument
from agenttx.integrations._block import TransactionBlock, preview_shown
from agenttx.integrations._catalog import ToolSpec
from agenttx.integrations._engine_tools import DEFAULT_EFFECT, FrameworkTool, engine_tools
from agenttx.integrations._failure import FailedCall, refusal_text
from agenttx.integrations._transaction import APPROVER, AgentTransaction, TransactionOptions
from agenttx.service import TransactionService
from agenttx.tools.contract import Tool

__all__ = [
    "DEFAULT_EFFECT",
    "LangGraphTransaction",
    "TransactionToolNode",
    "approve",
    "as_agenttx_tools",
    "refuse",
    "transaction",
]

_KIND = "a LangChain tool"

LangChainTool = BaseTool | Callable[..., Any]

# The id of the tool call being run, set around the tool's run by ``tx.tool_node`` and by
# ``ordered_calls`` (LangGraph's ToolNode): the wrapped tool's coroutine gets only the model's
# arguments, and the id orders the message's calls and names the step's request (resume).
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
    given = [_langchain(t) for t in tools]
    return engine_tools(
        [FrameworkTool(t.name, t.description, _input_schema(t), _engine_run(t)) for t in given],
        effects=dict(effects or {}),
        default_effect=default_effect,
        undo={name: _engine_run(_langchain(u)) for name, u in (undo or {}).items()},
        kind=_KIND,
    )


def _engine_run(t: BaseTool) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    """Runs ``t`` on a step's arguments; its exception is the step's failure."""
    # Errors must reach the engine as exceptions, not as text the tool handled itself.
    runner = t.model_copy(update={"handle_tool_error": False, "handle_validation_error": False})

    async def run(arguments: dict[str, Any]) -> Any:
        return _json_output(await runner.ainvoke(arguments))

    return run


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
            token = _CALL_ID.set(str(call["id"] or ""))  # the step's request id (resume)
            try:
                answer: ToolMessage = await t.ainvoke({**call, "type": "tool_call"}, config)
            finally:
                _CALL_ID.reset(token)
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


def _decision(value: Any) -> tuple[bool, str, str, tuple[str, ...]]:
    if not isinstance(value, Mapping) or not isinstance(value.get("approved"), bool):
        raise InvalidArgument(
            f"resume the approval with agenttx.integrations.langgraph.approve(principal) or "
            f"refuse(principal, reason), not {value!r}"
        )
    roles = tuple(value.get("roles") or APPROVER)
    return value["approved"], str(value.get("principal", "")), str(value.get("reason", "")), roles


# ---------------------------------------------------------------------- the transaction


class LangGraphTransaction(TransactionBlock):
    """One graph run as one AgentTx transaction (made by ``transaction``)."""

    def __init__(self, core: AgentTransaction, messages_key: str = "messages") -> None:
        super().__init__(core)
        self.messages_key = messages_key

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
            approved, principal, reason, roles = _decision(interrupt(preview_shown(p)))
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


def transaction(
    service: TransactionService,
    *,
    messages_key: str = "messages",
    **options: Unpack[TransactionOptions],
) -> LangGraphTransaction:
    """``async with transaction(service, agent_id=…, mode=…) as tx:`` one graph run as one
    transaction on ``service`` (an ``agenttx.Engine`` or an ``AsyncAgentTxClient``), with the
    block's rules of ``TransactionBlock``; ``messages_key``: where the graph's state holds its
    messages."""
    return LangGraphTransaction(AgentTransaction(service, **options), messages_key)
