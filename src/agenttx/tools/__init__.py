"""Tools: the contract every tool meets, the registry, the context a tool runs with, built-ins."""

from agenttx.tools.context import StateView, SyncToolContext, ToolContext
from agenttx.tools.contract import Tool, tool
from agenttx.tools.registry import ToolRegistry, load_tools

__all__ = [
    "StateView",
    "SyncToolContext",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "load_tools",
    "tool",
]
