"""The tool registry: names to tools, plus the undo handlers they declare."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from agenttx.errors import InvalidArgument
from agenttx.tools.argument_errors import accepted_list, closest_names
from agenttx.tools.contract import Tool

# Tool names compared with an unknown one, at most: difflib takes ~3 us a name, so a step
# naming an unknown tool costs a few ms even in a registry of many thousands (the names of
# the same namespace, "crm." in "crm.creat", are compared first).
_MAX_COMPARED = 1000


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._undo: dict[str, Callable[..., Any]] = {}
        for t in tools:
            self.register(t)

    def register(self, t: Tool) -> None:
        if not isinstance(t, Tool):
            raise InvalidArgument(
                f"{t!r} is not a tool; decorate it with @agenttx.tool(name=..., effect=...)"
            )
        if t.name in self._tools and self._tools[t.name] is not t:
            raise InvalidArgument(f"tool {t.name!r} is registered twice")
        self._tools[t.name] = t
        if t.undo_fn is not None:
            self._undo[t.undo_name] = t.undo_fn

    def register_undo(self, name: str, fn: Callable[..., Any]) -> None:
        """An undo handler not tied to one tool (``ctx.register_undo(args, handler=name)``)."""
        self._undo[name] = fn

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def undo_handler(self, name: str) -> Callable[..., Any] | None:
        return self._undo.get(name)

    def unknown_tool_message(self, name: str) -> str:
        """What a step naming an unregistered tool fails with: the closest names first."""
        names = self.names()
        candidates = names
        if len(names) > _MAX_COMPARED:
            namespace = name.partition(".")[0] + "."
            same = [n for n in names if n.startswith(namespace)]
            candidates = (same or names)[:_MAX_COMPARED]
        close = closest_names(name, candidates, n=3)
        listed = close + [n for n in names if n not in close]
        suggestion = f" did you mean {close[0]}?" if close else ""
        known = accepted_list(listed, "(none)")
        return f"unknown tool '{name}';{suggestion} registered tools: {known}"

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __iter__(self) -> Any:
        return iter(sorted(self._tools.values(), key=lambda t: t.name))

    def __len__(self) -> int:
        return len(self._tools)


def load_tools(spec: str) -> list[Tool]:
    """Tools from ``module`` (every ``Tool`` at module level) or ``module:attr`` (a tool, or a
    list of tools, or a zero-argument callable returning either)."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgument(f"cannot import tools module {module_name!r}: {exc}") from exc
    if not attr:
        found = [v for v in vars(module).values() if isinstance(v, Tool)]
        if not found:
            raise InvalidArgument(f"module {module_name!r} defines no @agenttx.tool functions")
        return found
    try:
        obj: Any = getattr(module, attr)
    except AttributeError:
        raise InvalidArgument(f"module {module_name!r} has no attribute {attr!r}") from None
    if callable(obj) and not isinstance(obj, Tool):
        obj = obj()
    items = [obj] if isinstance(obj, Tool) else list(obj)
    bad = [i for i in items if not isinstance(i, Tool)]
    if bad:
        raise InvalidArgument(f"{spec}: {bad[0]!r} is not an @agenttx.tool")
    return items
