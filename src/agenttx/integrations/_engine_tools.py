"""Framework tools as ``agenttx.Tool``s, where the engine runs: what every framework's
``as_agenttx_tools`` decides, whatever the framework.

A framework module describes each of its tools as a ``FrameworkTool`` (name, description, JSON
schema, and a coroutine running the framework tool on the step's arguments, raising on failure)
and ``engine_tools`` checks the declarations and makes the AgentTx tools:

- an undeclared tool is ``DEFAULT_EFFECT`` (irreversible: its effects cannot be assumed
  undoable, so a rewind never pretends to take them back and a crash during it is an unknown
  outcome, never a silent second run);
- a framework tool can only be ``read``, ``compensatable`` or ``irreversible``
  (``FRAMEWORK_EFFECTS``): it cannot write AgentTx managed state or stage an effect, so
  ``state`` or ``staged`` would promise an undo or a deferral that never happens;
- a ``compensatable`` tool has exactly one undo, recorded durably before the call runs; any
  other tool has none;
- ``effects`` and ``undo`` name only tools that are there, and no name is given twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agenttx.errors import InvalidArgument
from agenttx.tools.contract import Tool, check_tool_name
from agenttx.tools.contract import tool as agenttx_tool
from agenttx.types import EffectClass

__all__ = ["DEFAULT_EFFECT", "FRAMEWORK_EFFECTS", "FrameworkTool", "engine_tools"]

DEFAULT_EFFECT = "irreversible"
FRAMEWORK_EFFECTS = ("read", "compensatable", "irreversible")

# Runs a framework tool on the step's arguments; answers its output as JSON, raises on failure.
Runner = Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class FrameworkTool:
    """One framework tool, as the engine needs it."""

    name: str
    description: str
    schema: dict[str, Any]  # the JSON schema of the arguments the model sends
    run: Runner


def engine_tools(
    tools: Sequence[FrameworkTool],
    *,
    effects: Mapping[str, str],
    default_effect: str,
    undo: Mapping[str, Runner],
    kind: str,
) -> list[Tool]:
    """The AgentTx tools for ``tools``; ``kind`` names what they are in errors ("an Agents
    SDK function tool")."""
    names = [t.name for t in tools]
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
        _engine_tool(t, effects.get(t.name, default_effect), undo.get(t.name), kind) for t in tools
    ]


def _engine_tool(t: FrameworkTool, effect: str, take_back: Runner | None, kind: str) -> Tool:
    check_tool_name(t.name)
    if effect not in FRAMEWORK_EFFECTS:
        raise InvalidArgument(
            f"tool {t.name}: effect {effect!r} is not one {kind} can have; use one of "
            f"{', '.join(FRAMEWORK_EFFECTS)} (a tool that writes AgentTx state or stages an "
            "effect is an @agenttx.tool of its own)"
        )
    compensatable = effect == EffectClass.COMPENSATABLE.value
    if compensatable and take_back is None:
        raise InvalidArgument(
            f"tool {t.name} is compensatable, so it needs an undo: pass undo={{{t.name!r}: "
            f"{kind} that takes the call back, given the same arguments}}"
        )
    if not compensatable and take_back is not None:
        raise InvalidArgument(f"tool {t.name} has an undo, so declare it compensatable")

    async def run(ctx: Any, arguments: Any) -> Any:
        if compensatable:
            await ctx.register_undo(dict(arguments))  # durable before the outside call
        return await t.run(dict(arguments))

    made = agenttx_tool(name=t.name, effect=effect, description=t.description, schema=t.schema)(run)
    if take_back is not None:
        undoer = take_back

        async def undo(ctx: Any, **arguments: Any) -> None:
            await undoer(arguments)

        made.undo(undo)
    return made
