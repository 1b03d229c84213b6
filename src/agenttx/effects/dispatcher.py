"""The outbox dispatcher: delivers committed effects at least once, with retries and dead
letters.

Rows are claimed with a lease (``Store.claim_outbox``), so a dispatcher that dies mid-delivery
loses nothing: the lease expires and another claim delivers the row again, with the same
idempotency key. Failed attempts back off exponentially (``base · 2^(attempt-1)``, capped);
after ``max_attempts`` the row is ``dead`` and stays listed until an operator requeues it (or
dead-letter retention deletes it, ``core.retention``) —
except for a full disk (``ENOSPC`` from the channel): that says nothing about the effect, so
those attempts go on at the capped backoff and never make the row dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence

from agenttx.audit import AuditEvent, AuditKey, AuditKind
from agenttx.effects.channels import Channel, Effect, PermanentDeliveryError
from agenttx.redaction import redact
from agenttx.store.contract import OutboxRow, Store

log = logging.getLogger("agenttx.effects")


class OutboxDispatcher:
    def __init__(
        self,
        store: Store,
        channels: Mapping[str, Channel],
        *,
        default: Channel | None = None,
        clock: Callable[[], float] = time.time,
        max_attempts: int,  # these three: the Settings dispatch_* (agenttx.settings)
        backoff_base_s: float,
        backoff_max_s: float = 300.0,
        lease_secs: float,
        poll_s: float = 1.0,
        delivery_timeout_s: float = 30.0,
        rng: Callable[[], float] = random.random,
        audit_key: AuditKey | None = None,
    ) -> None:
        self.store = store
        self.channels = dict(channels)
        self.default = default
        self.clock = clock
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.lease_secs = lease_secs
        self.poll_s = poll_s
        self.delivery_timeout_s = delivery_timeout_s
        self.rng = rng  # in [0, 1): the jitter of channels that ask for it
        self.audit_key = audit_key  # what delivery records are keyed with (None: plain)
        self._wake = asyncio.Event()

    def wake(self, _ids: Sequence[int] = ()) -> None:
        self._wake.set()

    def channel_for(self, name: str) -> Channel | None:
        return self.channels.get(name, self.default)

    async def aclose(self) -> None:
        """Close the channels that hold connections (an HTTP client's pool)."""
        for channel in {id(c): c for c in [*self.channels.values(), self.default]}.values():
            close = getattr(channel, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    async def deliver_now(self, rows: Sequence[OutboxRow]) -> tuple[int, list[str]]:
        """Try these rows once now — a commit claimed them for its caller, so the reply can
        report the result; failures go back to the queue for the background loop. Returns
        (delivered, error lines)."""
        delivered, errors = 0, []
        for row in rows:
            error = await self._deliver(row)
            if error is None:
                delivered += 1
            else:
                errors.append(error)
        return delivered, errors

    async def run_once(self, limit: int = 100) -> int:
        """Deliver every due row (up to ``limit``); returns how many were attempted."""
        rows = await self.store.claim_outbox(
            now=self.clock(), lease_secs=self.lease_secs, limit=limit
        )
        for row in rows:
            await self._deliver(row)
        return len(rows)

    async def run(self, stop: asyncio.Event) -> None:
        listener = asyncio.create_task(self._listen(stop)) if self.store.shared else None
        try:
            await self._loop(stop)
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await listener

    async def _listen(self, stop: asyncio.Event) -> None:
        """Commits on other replicas notify the store; wake this dispatcher at once."""
        while not stop.is_set():
            try:
                if await self.store.wait_for_outbox(30.0):
                    self.wake()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("outbox listener failed; retrying")
                await asyncio.sleep(1.0)

    async def _loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                busy = await self.run_once()
            except Exception:
                log.exception("outbox dispatch pass failed")
                busy = 0
            if busy:
                continue
            self._wake.clear()
            waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
            try:
                await asyncio.wait(
                    waiters, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED
                )
            finally:  # also when cancelled by close(): leave no waiter task behind
                for w in waiters:
                    w.cancel()

    async def _deliver(self, row: OutboxRow) -> str | None:
        attempt = row.attempts + 1
        effect = Effect(
            id=row.id,
            tx_id=row.tx_id,
            step_id=row.step_id,
            channel=row.channel,
            payload=json.loads(row.payload_json),
            idempotency_key=row.idempotency_key,
            attempt=attempt,
            committed_at=row.created_at,
            tenant=row.tenant,
        )
        channel = self.channel_for(row.channel)
        error = ""
        permanent = False
        no_room = False  # the channel ran out of disk: not the effect's fault
        if channel is None:
            error = f"no dispatcher for channel {row.channel!r}"
            permanent = True
        else:
            try:
                async with asyncio.timeout(self.delivery_timeout_s):
                    await channel.deliver(effect)
            except PermanentDeliveryError as exc:
                error, permanent = redact(str(exc)) or type(exc).__name__, True
            except Exception as exc:  # listed with the effect (ListEffects): secrets masked
                error = redact(f"{type(exc).__name__}: {exc}")
                no_room = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
        now = self.clock()
        if not error:
            await self.store.settle_outbox(
                row.id,
                status="delivered",
                attempts=attempt,
                next_attempt_at=now,
                error="",
                now=now,
                audit=_delivery_event(row, attempt, "delivered", "", now, self.audit_key),
            )
            return None
        dead = permanent or (attempt >= self.max_attempts and not no_room)
        delay = min(self.backoff_base_s * (2 ** (attempt - 1)), self.backoff_max_s)
        # Jitter (for channels that ask): many effects failing together against one server
        # (an outage) must not all come back at the same instant when it recovers.
        jitter = min(max(float(getattr(channel, "jitter", 0.0)), 0.0), 1.0)
        delay *= 1.0 - jitter * self.rng()
        status = "dead" if dead else "pending"
        await self.store.settle_outbox(
            row.id,
            status=status,
            attempts=attempt,
            # A dead row is never due again: its time is the attempt that killed it, which
            # dead-letter retention counts from (``Store.prune_dead``).
            next_attempt_at=now if dead else now + delay,
            error=error,
            now=now,
            audit=_delivery_event(row, attempt, status, error, now, self.audit_key),
        )
        log.warning("effect %s (%s) attempt %d failed: %s", row.id, row.channel, attempt, error)
        return f"{row.channel} effect {row.idempotency_key} (step {row.step_id}): {error}"


def _delivery_event(
    row: OutboxRow, attempt: int, outcome: str, error: str, now: float, key: AuditKey | None
) -> AuditEvent:
    """One delivery attempt, for the committed transaction's audit chain."""
    data: dict[str, object] = {
        "outbox_id": row.id,
        "step": row.step_id,
        "channel": row.channel,
        "idempotency_key": row.idempotency_key,
        "attempt": attempt,
        "outcome": outcome,  # delivered, pending (retried later) or dead
    }
    if error:
        data["error"] = error[:500]
    return AuditEvent(row.tx_id, AuditKind.DELIVERY.value, now, data, key)
