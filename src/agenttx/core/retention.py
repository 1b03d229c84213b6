"""Retention: what maintenance deletes, and when, so the database does not grow without bound.

- An **ended** transaction (committed, rolled back, failed) is kept ``retention_days`` after
  its last change, then its row, steps (arguments, outputs, raw context) and undo rows go, one
  transaction per store transaction, leaving its audit chain a tombstone (the chain's final
  seq and hash: the row was what told a cut-off end, ``docs/audit.md``). One with an effect
  still to deliver stays until it is delivered (a dead letter keeps its transaction until it
  is retried or resolved).
- A **delivered** outbox row is kept ``retention_days`` after delivery; pending rows are never
  pruned.
- A **dead letter** (a dead outbox row) is for a human, so it is kept longer:
  ``dead_letter_retention_days`` after its last attempt, and never while its transaction is
  still open. It goes first in a pass, so the ended transaction it kept can go in the same
  pass (if that is past ``retention_days`` too). A retried one is pending again and waits.
- A **stored reply** (request idempotency) answers a retry for ``retention_days`` (a day when
  retention is off, as before retention existed).
- An **audit chain** is kept ``audit_retention_days`` after its newest record, and only once
  its transaction is gone; it is deleted whole with its tombstone, in one unit, never
  partially. Its retention is at least the transactions' (``EngineConfig`` refuses less), so
  a chain never goes before the transaction it records.

``retention_days = 0`` keeps ended transactions, delivered effects, dead letters and chains
forever; ``audit_retention_days = 0`` keeps the chains forever, ``dead_letter_retention_days =
0`` the dead letters. Open transactions are never touched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agenttx.core.config import Clock, EngineConfig
from agenttx.store.contract import Store

log = logging.getLogger("agenttx.retention")

DAY_S = 86_400.0
REQUEST_TTL_S = DAY_S  # how long a stored reply answers a retried request_id without retention
BATCH = 500  # transactions or chains per round: one pass keeps each unit small


@dataclass(frozen=True, slots=True)
class Pruned:
    transactions: int = 0
    delivered_effects: int = 0
    stored_replies: int = 0
    audit_chains: int = 0
    dead_letters: int = 0

    @property
    def total(self) -> int:
        return (
            self.transactions
            + self.delivered_effects
            + self.stored_replies
            + self.audit_chains
            + self.dead_letters
        )


class Retention:
    def __init__(self, store: Store, config: EngineConfig, clock: Clock) -> None:
        self.store = store
        self.config = config
        self.clock = clock

    async def prune(self, *, rounds: int = 20) -> Pruned:
        """One maintenance pass: up to ``rounds`` batches of each kind (a backlog is worked
        off over several passes rather than holding the store in one)."""
        days, audit_days = self.config.retention_days, self.config.audit_retention_days
        now = self.clock()
        if days <= 0:
            return Pruned(stored_replies=await self.store.prune_requests(now - REQUEST_TTL_S))
        horizon = now - days * DAY_S
        # Dead letters first: the ended transaction a dead letter kept can then go this pass.
        dead_days = self.config.dead_letter_retention_days
        dead = await self.store.prune_dead(now - dead_days * DAY_S) if dead_days > 0 else 0
        transactions = 0
        for _ in range(rounds):
            n = await self.store.prune_ended(horizon, limit=BATCH, now=now)
            transactions += n
            if n < BATCH:
                break
        delivered = await self.store.prune_delivered(horizon)
        replies = await self.store.prune_requests(horizon)
        chains = 0
        if audit_days > 0:
            audit_horizon = now - audit_days * DAY_S
            for _ in range(rounds):
                n = await self.store.prune_audit(audit_horizon, limit=BATCH)
                chains += n
                if n < BATCH:
                    break
        pruned = Pruned(transactions, delivered, replies, chains, dead)
        if pruned.total:
            log.info(
                "retention pruned %d transactions, %d delivered effects, %d dead letters, "
                "%d stored replies, %d audit chains",
                transactions,
                delivered,
                dead,
                replies,
                chains,
            )
        return pruned
