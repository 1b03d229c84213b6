"""Malformed stdio frames answered as JSON-RPC says: a line that is not JSON gets -32700
(parse error), JSON that is not a JSON-RPC message gets -32600 (invalid request), with the
request's id when one can be read, else ``null``.

The SDK's stdio transport hands such a line to the server as an exception, which its loop
only logs; the caller would wait for an answer forever. ``AnsweringMalformed`` stands between
the two: it answers those lines itself and passes every message on unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

log = logging.getLogger("agenttx.mcp")


class AnsweringMalformed:
    """A read stream of messages (the SDK's ``ReadStream``) that answers malformed frames on
    ``write`` instead of passing them on."""

    def __init__(self, read: Any, write: Any) -> None:
        self._read = read
        self._write = write

    async def receive(self) -> SessionMessage:
        while True:
            item = await self._read.receive()  # anyio.EndOfStream at the end passes through
            if not isinstance(item, Exception):
                return item  # type: ignore[no-any-return]
            await self._write.send(SessionMessage(error_reply(item)))

    def __aiter__(self) -> AnsweringMalformed:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._read.aclose()

    async def __aenter__(self) -> AnsweringMalformed:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:  # ``last_context`` and the like: the inner's
        return getattr(self._read, name)


def error_reply(exc: Exception) -> types.JSONRPCError:
    code, message, request_id = types.INVALID_REQUEST, "Invalid Request", None
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False)
        if errors and errors[0].get("type") == "json_invalid":
            code, message = types.PARSE_ERROR, "Parse error"
        else:
            raw = errors[0].get("input") if errors else None
            if isinstance(raw, dict) and isinstance(raw.get("id"), str | int):
                request_id = raw["id"]
    log.warning("mcp malformed frame: %s", message, extra={"code": code})
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )
