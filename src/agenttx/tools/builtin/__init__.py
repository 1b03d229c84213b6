"""Built-in tools with the reference's names, arguments, outputs and error wording."""

from __future__ import annotations

from agenttx.outbound import OutboundGuard
from agenttx.tools.builtin.effect import effect_stage
from agenttx.tools.builtin.fs import fs_read, fs_write, restore_file
from agenttx.tools.builtin.kv import kv_delete, kv_get, kv_put
from agenttx.tools.builtin.mail import email_send
from agenttx.tools.builtin.record import record_get, record_insert
from agenttx.tools.builtin.webhook import webhook_post
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


def outbound_tools(guard: OutboundGuard) -> tuple[Tool, ...]:
    """The built-ins that reach outside after commit (``email.send``, ``webhook.post``), the
    webhook's targets checked by ``guard``: the server's allow-list, so not a constant."""
    return (email_send, webhook_post(guard))


__all__ = ["BUILTIN_TOOLS", "outbound_tools", "restore_file"]
