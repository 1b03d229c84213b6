"""The HTTP listener's connections before a request: each must send a whole request head
(request line and headers) within ``header_timeout_s`` of opening, or of its previous
response ending, and at most ``max_waiting`` connections may be waiting to at once.

uvicorn's h11 protocol holds a half-sent request for ever (its keep-alive timer only starts
after a response, and any byte stops it), so a client trickling a header — or never sending
one — kept a socket and a descriptor each, before authentication could refuse it (a slow
loris: 800 held 45 s, 18,751 descriptors of a 20,000 limit). ``heads_protocol`` makes the
protocol class that adds both rules; everything else is uvicorn's.

- The deadline runs from the moment the connection has no request in service, and only a
  complete head stops it (not a byte, as for uvicorn's own keep-alive timer, which stays too:
  an idle keep-alive connection still closes after its ``timeout_keep_alive``).
- Past ``max_waiting`` the *oldest* waiting connection is closed, not the new one: a burst of
  slow connections then cannot keep a normal client (which sends its head at once) out.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol

from agenttx.settings import SETTINGS

# The settings' defaults (``agenttx.settings``): a real client sends its head in one packet.
HEADER_TIMEOUT_S: float = SETTINGS["http_header_timeout_s"].default  # for a whole request head
MAX_WAITING: int = SETTINGS["http_max_waiting_connections"].default  # heads awaited at once


class _Waiting:
    """The connections waiting for a request head, oldest first (a dict keeps order)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.connections: dict[HeadTimedProtocol, None] = {}

    def add(self, connection: HeadTimedProtocol) -> None:
        self.connections.pop(connection, None)  # now waiting anew: the newest
        self.connections[connection] = None
        while len(self.connections) > self.limit:
            oldest = next(iter(self.connections))
            oldest.drop()

    def discard(self, connection: HeadTimedProtocol) -> None:
        self.connections.pop(connection, None)


class HeadTimedProtocol(H11Protocol):
    """uvicorn's h11 protocol with the deadline and the cap of the module docstring; made
    per listener by ``heads_protocol`` (the class attributes are that listener's)."""

    header_timeout_s: ClassVar[float] = HEADER_TIMEOUT_S
    waiting: ClassVar[_Waiting]

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        # The request cycle last answered (None: none yet): a ``self.cycle`` other than it
        # means a new request head has arrived.
        self._served: Any = None
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self.cycle is not self._served:
            self._head_arrived()

    def on_response_complete(self) -> None:
        answered = self.cycle
        super().on_response_complete()  # may start a pipelined request already
        if self.transport.is_closing():
            return
        self._served = answered
        if self.cycle is answered:
            self._await_head()
        else:
            self._head_arrived()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        super().connection_lost(exc)

    def drop(self) -> None:
        """Close the connection: no request head in time, or too many waiting."""
        self._head_arrived()
        if not self.transport.is_closing():
            self.transport.close()

    def _await_head(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self.drop)
        self.waiting.add(self)

    def _head_arrived(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self.waiting.discard(self)


def heads_protocol(
    header_timeout_s: float = HEADER_TIMEOUT_S, max_waiting: int = MAX_WAITING
) -> type[HeadTimedProtocol]:
    """A protocol class for one listener (``uvicorn.Config(http=...)``), with its own count
    of waiting connections."""
    return type(
        "HeadTimedProtocol",
        (HeadTimedProtocol,),
        {"header_timeout_s": header_timeout_s, "waiting": _Waiting(max_waiting)},
    )
