"""The tool registry: names to tools, plus the undo handlers they declare."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
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

    def replace(self, t: Tool) -> None:
        """Register ``t`` in place of any tool of that name (the gateway, when a downstream
        server's tools change while the engine runs)."""
        self._tools.pop(t.name, None)
        self.register(t)

    def remove(self, name: str) -> None:
        """Forget the tool ``name`` (a downstream tool that is gone); a no-op if unknown."""
        self._tools.pop(name, None)

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
    list of tools, or a zero-argument callable returning either). ``module`` may also be the
    path of a ``.py`` file (``./tools.py``, ``/srv/agent/tools.py:TOOLS``); its directory then
    goes first on the import path, as ``python tools.py`` would put it, so it can import its
    neighbours. A module that fails to import is one ``InvalidArgument`` naming the cause and
    where it was raised, not the traceback."""
    module_name, _, attr = spec.partition(":")
    module = _import_tools_module(module_name)
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


def _import_tools_module(name: str) -> ModuleType:
    if name.endswith(".py"):
        return _import_file(Path(name))
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name or name.startswith(f"{exc.name}."):
            raise InvalidArgument(
                f"cannot import tools module {name!r}: no module named {exc.name!r} on the "
                "import path; run from the directory that holds it, add that directory to "
                "PYTHONPATH, or give the file's path (--tools ./my_tools.py)"
            ) from exc
        raise InvalidArgument(_import_failure(name, exc)) from exc
    except Exception as exc:  # the module's own code raised while it was imported
        raise InvalidArgument(_import_failure(name, exc)) from exc


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise InvalidArgument(f"tools file {str(path)!r} does not exist")
    path = path.resolve()
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InvalidArgument(f"tools file {str(path)!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    # Registered before it runs, as ``import`` does: pydantic resolves the tools' annotations
    # through sys.modules[fn.__module__].
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise InvalidArgument(_import_failure(str(path), exc)) from exc
    return module


def _import_failure(name: str, exc: BaseException) -> str:
    """``cannot import tools module 'x': ZeroDivisionError: division by zero (x.py, line 3)``:
    the exception and the innermost line of the user's code that raised it."""
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
        text = f"SyntaxError: {exc.msg}"
    else:
        frames = [
            f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename
        ]
        if frames:
            where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"cannot import tools module {name!r}: {text}{where}"
