"""The tools a service has, in one shape whichever service it is.

``Engine.list_tools()`` answers at once with each tool's description as a dict; the async
client's ``list_tools()`` is a call to the server answering ``ToolInfo`` values. Both say the
same things under the same names, so ``listed_tools`` reads either by those names.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agenttx.errors import FailedPrecondition
from agenttx.service import TransactionService

__all__ = ["ToolSpec", "listed_tools", "tools_not_loaded"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the service lists it: what a framework needs to offer it to a model."""

    name: str  # the AgentTx name (may hold dots)
    description: str
    effect: str  # read, state, compensatable, staged, irreversible
    input_schema: dict[str, Any]


def _field(item: Any, name: str, default: Any) -> Any:
    if isinstance(item, Mapping):
        return item.get(name, default)
    return getattr(item, name, default)


async def listed_tools(service: TransactionService) -> dict[str, ToolSpec]:
    """Every tool ``service`` has, by AgentTx name, in the order it lists them."""
    lister = getattr(service, "list_tools", None)
    if lister is None:
        raise FailedPrecondition(
            f"{type(service).__name__} cannot list its tools; pass an agenttx.Engine or an "
            "agenttx.client.AsyncAgentTxClient"
        )
    listing = lister()
    if inspect.isawaitable(listing):
        listing = await listing
    specs: dict[str, ToolSpec] = {}
    for item in listing:
        schema = _field(item, "input_schema", None)
        spec = ToolSpec(
            name=str(_field(item, "name", "")),
            description=str(_field(item, "description", "") or ""),
            effect=str(_field(item, "effect", "")),
            input_schema=dict(schema) if isinstance(schema, Mapping) else {"type": "object"},
        )
        specs[spec.name] = spec
    return specs


def tools_not_loaded(missing: list[str], listed: Mapping[str, ToolSpec]) -> FailedPrecondition:
    """The error for framework tools the service does not have: where the code must run."""
    names = ", ".join(repr(m) for m in missing)
    one = len(missing) == 1
    return FailedPrecondition(
        f"{'tool' if one else 'tools'} {names} {'is' if one else 'are'} not loaded on the "
        "server: a tool's code runs where the engine runs. Pass "
        "agenttx.integrations.<framework>.as_agenttx_tools(your_tools, effects={...}) to "
        "Engine.open(tools=...), or serve them with `agenttx serve --tools module:attr` (attr: "
        "that list). The service has: " + (", ".join(sorted(listed)) or "no tools")
    )
