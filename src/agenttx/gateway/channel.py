"""The outbox channel of staged downstream calls: each made once, after commit.

The dispatcher delivers at least once (a crash mid-delivery means another try with the same
idempotency key). A downstream MCP server knows nothing of our keys, so the channel keeps a
delivery journal — a JSON-lines file, one fsync'd line per state change — and decides from it:

- ``done``: the call was made and answered; a redelivery returns at once (exactly once).
- ``started`` with no answer (AgentTx died, the call timed out, the session broke mid-call):
  the call may have run. A tool declared idempotent is called again; any other is a dead
  letter whose error says the outcome is unknown (never a blind retry), for an operator to
  check and requeue. The key is then ``unknown``; the requeued effect's delivery makes the
  call.
- ``failed``: the server refused the call or the tool answered ``isError``; it did not take
  effect as asked, so it is retried with the dispatcher's backoff and goes dead after its
  attempts.

The journal is shared by the processes of one data directory (an ``flock`` covers
read-decide-append); replicas on PostgreSQL each keep their own, so a call interrupted on one
replica and redelivered by another is retried (documented in ``docs/gateway.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from agenttx.effects.channels import Effect
from agenttx.errors import PermanentDeliveryError
from agenttx.gateway.config import Secrets
from agenttx.gateway.session import CallLost, DownstreamError, DownstreamSession
from agenttx.gateway.tools import DownstreamToolError, output_of

# How long a delivery waits for a session that is (re)connecting before it is retried later.
CONNECT_WAIT_S = 10.0


class DeliveryJournal:
    """Delivery states by idempotency key, durable in a JSON-lines file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._states: dict[str, str] = {}
        self._scanned = 0  # bytes of the file read into ``_states``
        self._lock = threading.Lock()

    def _catch_up(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if size < self._scanned:
            self._states.clear()
            self._scanned = 0
        if size == self._scanned:
            return
        chunk = os.pread(fd, size - self._scanned, self._scanned)
        end = chunk.rfind(b"\n") + 1
        for line in chunk[:end].splitlines():
            try:
                entry = json.loads(line)
                self._states[str(entry["key"])] = str(entry["state"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn line from a crash mid-append
        self._scanned += end

    def transition(self, key: str, state: str, *, unless: frozenset[str] = frozenset()) -> str:
        """Record ``state`` for ``key`` unless its current state is in ``unless``; returns the
        state before. Durable (fsync) before it returns."""
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # other processes of this data dir append too
                self._catch_up(fd)
                previous = self._states.get(key, "")
                if previous in unless:
                    return previous
                line = json.dumps({"key": key, "state": state}, separators=(",", ":")) + "\n"
                os.write(fd, line.encode())
                os.fsync(fd)
                self._states[key] = state
                self._scanned = os.fstat(fd).st_size
                return previous
            finally:
                os.close(fd)


class GatewayChannel:
    """Delivers ``mcp_gateway`` effects: ``{server, tool, arguments, idempotent, timeout_ms?}``
    (``timeout_ms``: the tool's own limit, within the dispatcher's delivery timeout)."""

    def __init__(
        self, sessions: Mapping[str, DownstreamSession], journal: DeliveryJournal, secrets: Secrets
    ) -> None:
        self.sessions = sessions
        self.journal = journal
        self.secrets = secrets

    async def deliver(self, effect: Effect) -> None:
        payload = effect.payload if isinstance(effect.payload, dict) else {}
        server, tool = str(payload.get("server", "")), str(payload.get("tool", ""))
        arguments = payload.get("arguments") or {}
        idempotent = payload.get("idempotent") is True
        session = self.sessions.get(server)
        if session is None:
            raise PermanentDeliveryError(
                f"no MCP server {server!r} in the gateway file; add it and requeue the effect"
            )
        if not await session.wait_ready(CONNECT_WAIT_S):
            raise ConnectionError(f"MCP server {server!r} is not connected: {session.last_error}")
        key = effect.idempotency_key
        skip = frozenset({"done"} if idempotent else {"done", "started"})
        previous = await asyncio.to_thread(self.journal.transition, key, "started", unless=skip)
        if previous == "done":
            return  # made and answered before; this is a redelivery
        if previous == "started" and not idempotent:
            # Dead, and marked so: an operator who checked and requeues it gets the call made
            # (a redelivery of an "unknown" key is that requeue, never the dispatcher's own).
            await asyncio.to_thread(self.journal.transition, key, "unknown")
            raise PermanentDeliveryError(
                f"outcome unknown: {server}.{tool} may have run before the delivery was "
                "interrupted; check it downstream, and requeue the effect only if it did not"
            )
        timeout_ms = payload.get("timeout_ms")
        limit = timeout_ms / 1000 if isinstance(timeout_ms, int) and timeout_ms > 0 else None
        try:
            # A timeout leaves the key "started": the next try decides (idempotent or unknown).
            async with asyncio.timeout(limit):
                result = await session.call(tool, dict(arguments))
        except (DownstreamError, ConnectionError) as exc:
            if not isinstance(exc, CallLost):
                # Refused or never sent: it did not take effect. Retried with backoff.
                await asyncio.to_thread(self.journal.transition, key, "failed")
            raise
        try:
            output_of(result, self.secrets)
        except DownstreamToolError:
            await asyncio.to_thread(self.journal.transition, key, "failed")
            raise
        with contextlib.suppress(OSError):
            # The call is made; if this line is lost, a redelivery sees "started" and stops
            # as outcome unknown rather than call again.
            await asyncio.to_thread(self.journal.transition, key, "done")
