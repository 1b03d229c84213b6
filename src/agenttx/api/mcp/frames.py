"""stdio frames, bounded and answered: a line that is not JSON gets -32700 (parse error),
JSON that is not a JSON-RPC message gets -32600 (invalid request), with the request's id when
one can be read, else ``null``; a line over ``MAX_LINE_BYTES`` is never held in memory whole:
it is skipped and answered -32600 ("request too large").

The SDK's stdio transport hands a malformed line to the server as an exception, which its loop
only logs; the caller would wait for an answer forever. ``AnsweringMalformed`` stands between
the two: it answers those lines itself and passes every message on unchanged. ``CappedLines``
is the stdin the transport reads, cut to size; ``LoopStdout`` the stdout it writes, from the
event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import queue
import stat
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

log = logging.getLogger("agenttx.mcp")

# The HTTP listener's body limit: a request carries at most 1 MiB of arguments and 1 MiB of
# reasoning, plus framing.
MAX_LINE_BYTES = 4 << 20
# What a skipped oversized line becomes: JSON that is no JSON-RPC message, recognised below.
_OVERSIZED_KEY = "agenttx.oversized_line_bytes"


class CappedLines:
    """Lines of a binary stream as text, each at most ``cap`` bytes; a longer one is read
    past in pieces and replaced by a marker the server answers as too large.

    The blocking reads run on a daemon thread of its own, one line per request from the
    event loop (so nothing is read ahead): a session that ends while the thread waits for a
    line leaves it blocked, and the process can still exit."""

    def __init__(self, raw: IO[bytes], cap: int = MAX_LINE_BYTES) -> None:
        self._raw = raw
        self._cap = cap
        self._wanted: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]]
        self._wanted = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def __aiter__(self) -> CappedLines:
        return self

    async def __anext__(self) -> str:
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="mcp-stdin", daemon=True)
            self._thread.start()
        wanted: asyncio.Future[Any] = loop.create_future()
        self._wanted.put((loop, wanted))
        line = await wanted
        if line is None:
            raise StopAsyncIteration
        return str(line)

    def _serve(self) -> None:
        while True:
            loop, wanted = self._wanted.get()
            try:
                line: Any = self._read_line()
            except Exception as exc:  # a read error ends the stream, as EOF would
                log.warning("mcp stdin read failed: %s", exc)
                line = None
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_deliver, wanted, line)
            if line is None:
                return

    def _read_line(self) -> str | None:
        data = self._raw.readline(self._cap + 1)
        if not data:
            return None
        if len(data) <= self._cap or data.endswith(b"\n"):
            return data.decode("utf-8", "replace")
        size = len(data)
        while not data.endswith(b"\n"):  # skip the rest, a piece at a time
            data = self._raw.readline(1 << 16)
            if not data:
                break
            size += len(data)
        return f'{{"{_OVERSIZED_KEY}": {size}}}\n'


class LoopStdout:
    """The stdout the SDK's transport writes each frame to (``write`` then ``flush``), written
    by the event loop itself through an asyncio pipe transport: what the pipe takes at once is
    written in place, the rest as the reader drains it, and ``flush`` returns once the whole
    frame is in the pipe. The SDK's own stdout hops to a worker thread for each of the two
    calls: two thread wake-ups a reply, on the path of every call (``benchmarks/gateway.py``).

    Made by ``open`` for a pipe, socket or terminal (what an agent host gives); a stdout
    redirected to a file keeps the SDK's (a file has no non-blocking writes)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._pending: list[str] = []  # this frame's text, written by the next ``flush``

    @classmethod
    async def open(cls, raw: IO[bytes]) -> LoopStdout | None:
        if sys.platform == "win32" or not _pipe_like(raw.fileno()):
            return None
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, raw)
        # A drain waits until nothing is buffered: a flushed frame is in the pipe, as with the
        # blocking write it replaces, and at most one frame is ever held here.
        transport.set_write_buffer_limits(high=0)
        return cls(asyncio.StreamWriter(transport, protocol, None, loop))

    async def write(self, text: str) -> None:
        self._pending.append(text)

    async def flush(self) -> None:
        if self._pending:
            data = "".join(self._pending).encode("utf-8")
            self._pending.clear()
            self._writer.write(data)
        await self._writer.drain()  # raises if the reader is gone (a broken pipe), as a write would

    async def aclose(self) -> None:
        with contextlib.suppress(OSError):  # the reader went away: nothing more to deliver
            await self.flush()  # nothing is left buffered after it: the close is immediate
        self._writer.close()


def _pipe_like(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


@contextmanager
def claimed_stdout() -> Iterator[IO[bytes]]:
    """The process's stdout as a private stream, with fd 1 pointed at stderr while it is held,
    so stray output of a tool or a child process goes to the log, never into the frames (as
    the SDK does for the stdout it opens itself)."""
    private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(2, 1)
    stream = os.fdopen(private, "wb", closefd=False)
    try:
        yield stream
    finally:
        # fd 1 back to the wire, blocking again (``LoopStdout`` made it non-blocking, and the
        # process may still print); ``private`` stays open, as stdin's does.
        os.set_blocking(private, True)
        os.dup2(private, 1)


@contextmanager
def claimed_stdin() -> Iterator[IO[bytes]]:
    """The process's stdin as a private stream, with fd 0 pointed at the null device while it
    is held, so a tool or a child process reads EOF instead of stealing protocol frames."""
    private = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    stream = os.fdopen(private, "rb", buffering=1 << 16, closefd=False)
    try:
        yield stream
    finally:
        # fd 0 back; ``private`` stays open: a worker thread may still be blocked reading it,
        # and a closed descriptor could be reused under it.
        os.dup2(private, 0)


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
            line = _unparsed_line(item)
            if line is not None:
                # A long line is parsed on a worker thread: up to MAX_LINE_BYTES of JSON.
                if len(line) > _PARSE_ON_LOOP_CHARS:
                    recovered = await anyio.to_thread.run_sync(_lenient_message, line)
                else:
                    recovered = _lenient_message(line)
                if not isinstance(recovered, Exception):
                    return SessionMessage(recovered)
                item = recovered  # JSON after all: say what is wrong with it as a message
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


def _deliver(wanted: asyncio.Future[Any], line: str | None) -> None:
    if not wanted.done():  # a cancelled wait: the session is ending, the line with it
        wanted.set_result(line)


# Below this a line's lenient parse costs well under a millisecond: no thread hop.
_PARSE_ON_LOOP_CHARS = 64 << 10


def _unparsed_line(exc: Exception) -> str | None:
    """The line the SDK's JSON parser refused, if that is why ``exc`` was raised."""
    if not isinstance(exc, ValidationError):
        return None
    errors = exc.errors(include_url=False)
    if not errors or errors[0].get("type") != "json_invalid":
        return None
    raw = errors[0].get("input")
    return raw if isinstance(raw, str) else None


def _lenient_message(line: str) -> types.JSONRPCMessage | Exception:
    """The message of a line that is JSON by the standard but not by pydantic's parser, else
    why not (the exception to answer). That parser refuses a lone UTF-16 surrogate escape
    (``"\\ud800"``) anywhere in the frame and so loses the request id: the caller would get a
    parse error it cannot match to its request. Read leniently, the request goes on, and the
    engine's JSON policy answers the bad text where it sits, as on every other surface (a
    step's arguments: a failed step whose hint names ``json_utf8``)."""
    try:
        value = json.loads(line)
    except ValueError as exc:  # not JSON at all: a parse error, as the SDK said
        return exc
    try:
        return types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError as exc:  # JSON, but no JSON-RPC message: error_reply says which
        return exc


def error_reply(exc: Exception) -> types.JSONRPCError:
    code, message, request_id = types.INVALID_REQUEST, "Invalid Request", None
    if isinstance(exc, json.JSONDecodeError):
        code, message = types.PARSE_ERROR, "Parse error"
    elif isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False)
        if errors and errors[0].get("type") == "json_invalid":
            code, message = types.PARSE_ERROR, "Parse error"
        else:
            # Each member of the message union reports its own error; some hold the whole
            # message (a missing field), others only the part they refused (``params``): the
            # request's id is read from whichever holds the message.
            inputs = [e.get("input") for e in errors]
            whole = [raw for raw in inputs if isinstance(raw, dict) and "jsonrpc" in raw]
            raw = whole[0] if whole else (inputs[0] if inputs else None)
            if isinstance(raw, dict) and _OVERSIZED_KEY in raw:
                message = f"Request too large: a line of {raw[_OVERSIZED_KEY]} bytes (limit "
                message += f"{MAX_LINE_BYTES})"
            elif isinstance(raw, dict) and isinstance(raw.get("id"), str | int):
                request_id = raw["id"]
    log.warning("mcp malformed frame: %s", message, extra={"code": code})
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )
