"""A scripted chat model for the LangGraph tests, and the graph they run it in.

The model is LangChain's own ``GenericFakeChatModel``; what it answers comes from ``plan``, a
function of the messages it was sent, so a scripted agent can read a tool-error result (the
hint, the step to resume at) and answer from it, as a real model would. No network."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from agenttx.integrations.langgraph import LangGraphTransaction, TransactionToolNode

if TYPE_CHECKING:
    from scenarios import Call

Plan = Callable[[list[BaseMessage]], AIMessage]


class ScriptedAgent:
    """The agent node: sends the transcript (constraints in front) to the fake model."""

    def __init__(self, tx: LangGraphTransaction, plan: Plan) -> None:
        self.tx = tx
        self.sent: list[list[BaseMessage]] = []  # what the model was sent, turn by turn

        def answers() -> Iterator[AIMessage]:
            while True:  # evaluated when the model is called: plans from what it was sent
                yield plan(self.sent[-1])

        self.model = GenericFakeChatModel(messages=answers())

    async def __call__(self, state: MessagesState) -> dict[str, Any]:
        self.sent.append(self.tx.with_constraints(state["messages"]))
        return {"messages": [await self.model.ainvoke(self.sent[-1])]}


def graph(
    agent: ScriptedAgent,
    tools: TransactionToolNode | Any,  # or LangGraph's own ToolNode
    approval: Callable[..., Any] | None = None,
    checkpointer: Any = None,
) -> Any:
    """agent → tools → agent … until the model calls no tool; then the approval node, if
    given, else the end."""
    b = StateGraph(MessagesState)
    b.add_node("agent", agent)
    b.add_node("tools", tools)
    done = END
    if approval is not None:
        b.add_node("approve", approval, destinations=("agent", END))
        done = "approve"

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else done

    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", route, ["tools", done])
    b.add_edge("tools", "agent")
    return b.compile(checkpointer=checkpointer)


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def tool_results(messages: list[BaseMessage]) -> list[ToolMessage]:
    """The tool results after the model's last message with calls."""
    out: list[ToolMessage] = []
    for m in reversed(messages):
        if not isinstance(m, ToolMessage):
            break
        out.insert(0, m)
    return out


def calling(made: Sequence[Call]) -> AIMessage:
    """The model's message of these calls (a scenario's, ``scenarios.Call`` each)."""
    return AIMessage("", tool_calls=[call(name, call_id, **args) for name, call_id, args in made])
