"""The one count of open event streams, shared by every surface that holds one: gRPC
``WatchTransaction``, the HTTP event streams (``/v1/events``, ``/v1/transactions/{id}/events``)
and MCP's standalone ``GET /mcp`` stream.

Each stream holds a watch, a queue and a socket for as long as the client likes, so they are
counted together: at most ``max_streams`` open at once on the server, and ``max_streams_per_key``
of one API key (by its digest, never its secret). One more is refused before anything is
watched with ``TooManySubscribers`` (RESOURCE_EXHAUSTED on gRPC, 503 with ``Retry-After`` on
HTTP). Without API keys there is no key to count by: only the total holds.

A stream's ``Slot`` is given back however the stream ends (the client leaves, the server ends
it, an error, the listener's stop): each surface releases it in a ``finally`` around the whole
stream, and ``release`` may be called more than once. All of it runs on the server's event
loop, so the counts need no lock.
"""

from __future__ import annotations

from types import TracebackType

from agenttx.auth.keys import KeyGrant
from agenttx.errors import TooManySubscribers
from agenttx.settings import SETTINGS

# The settings' defaults (``agenttx.settings``, ``--max-streams``, ``--max-streams-per-key``).
MAX_STREAMS: int = SETTINGS["max_streams"].default  # open at once on the server, every surface
MAX_STREAMS_PER_KEY: int = SETTINGS["max_streams_per_key"].default  # of those, with one key
RETRY_AFTER_MS = 5000  # what a refused stream is told to wait (a slot frees when one closes)


class Slot:
    """One admitted stream's place in the count; ``release`` gives it back (once, however
    often it is called). A context manager: ``with slots.admit(grant): ...``."""

    def __init__(self, slots: StreamSlots, key: bytes | None) -> None:
        self._slots = slots
        self._key = key  # the grant's digest; None without keys
        self._released = False  # true iff given back: a second release does nothing

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._slots._give_back(self._key)

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class StreamSlots:
    """The open streams of every surface, counted in all and per API key (module doc)."""

    def __init__(
        self, max_streams: int = MAX_STREAMS, max_streams_per_key: int = MAX_STREAMS_PER_KEY
    ) -> None:
        self.max_streams = max_streams
        self.max_streams_per_key = max_streams_per_key
        self.open_count = 0  # streams admitted and not yet released; ≤ max_streams
        # Key digest → its streams open now (only keys with one or more).
        self._per_key: dict[bytes, int] = {}

    def admit(self, grant: KeyGrant | None) -> Slot:
        """A slot for one more stream of ``grant``'s key (None: no keys configured); raises
        ``TooManySubscribers`` naming the limit reached, the server's total first."""
        key = grant.digest if grant is not None else None
        if self.open_count >= self.max_streams:
            raise TooManySubscribers(self.max_streams, False, RETRY_AFTER_MS)
        if key is not None and self._per_key.get(key, 0) >= self.max_streams_per_key:
            raise TooManySubscribers(self.max_streams_per_key, True, RETRY_AFTER_MS)
        self.open_count += 1
        if key is not None:
            self._per_key[key] = self._per_key.get(key, 0) + 1
        return Slot(self, key)

    def _give_back(self, key: bytes | None) -> None:
        self.open_count -= 1
        if key is not None:
            left = self._per_key[key] - 1
            if left:
                self._per_key[key] = left
            else:
                del self._per_key[key]
