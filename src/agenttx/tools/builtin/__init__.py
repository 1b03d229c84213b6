"""Built-in tools with the reference's names, arguments, outputs and error wording."""

from __future__ import annotations

from agenttx.tools.builtin.effect import effect_stage
from agenttx.tools.builtin.fs import fs_read, fs_write, restore_file
from agenttx.tools.builtin.kv import kv_delete, kv_get, kv_put
from agenttx.tools.builtin.record import record_get, record_insert
from agenttx.tools.contract import Tool

BUILTIN_TOOLS: tuple[Tool, ...] = (
    kv_put,
    kv_get,
    kv_delete,
    record_insert,
    record_get,
    fs_write,
    fs_read,
    effect_stage,
)

__all__ = ["BUILTIN_TOOLS", "restore_file"]
