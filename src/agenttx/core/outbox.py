"""The outbox as an operator sees it: effects listed with their last error, and a dead
letter retried.

``list_effects`` pages through the outbox of the engine's tenant, oldest first, filtered by
status and transaction, and by owner for a caller who reads only its own transactions.
``retry_effect`` moves one dead effect back to pending with a fresh attempt count and tries it
once right away — claimed first, as a commit claims its effects, so the background loop cannot
send it at the same moment — and returns it as it stands after that attempt: ``delivered``,
``pending`` (it failed again and is retried with backoff) or ``dead`` (refused again).
Only dead effects can be retried: a pending one is already queued, and a delivered one was
delivered (sending it again is a new effect's job).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agenttx.core.commit import EffectRelease
from agenttx.core.eager import leave_eager
from agenttx.errors import FailedPrecondition, InvalidArgument, NotFound
from agenttx.store.contract import OutboxRow, Store
from agenttx.types import EffectInfo, EffectPage

STATUSES = ("pending", "delivering", "delivered", "dead")
DEFAULT_PAGE, MAX_PAGE = 100, 1000
MAX_EFFECT_ID = (1 << 63) - 1  # the store's id column is a signed 64-bit integer


class EffectDesk:
    def __init__(
        self, store: Store, dispatcher: EffectRelease, tenant: str, clock: Callable[[], float]
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.tenant = tenant  # listings and retries are scoped to it, or to the caller's
        self.clock = clock

    async def list_effects(
        self,
        *,
        statuses: Sequence[str] = (),
        transaction_id: str = "",
        after_id: int = 0,
        limit: int = DEFAULT_PAGE,
        tenant: str | None = None,
        owner: str | None = None,
    ) -> EffectPage:
        """``owner``: only effects of transactions that principal began (``read_owner``)."""
        unknown = sorted(set(statuses) - set(STATUSES))
        if unknown:
            raise InvalidArgument(
                f"unknown effect status {unknown[0]!r}; use {', '.join(STATUSES)}"
            )
        if not 0 <= after_id <= MAX_EFFECT_ID:
            raise InvalidArgument(f"after_id must be 0..{MAX_EFFECT_ID}")
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidArgument(f"page_size {limit} is over the limit of {MAX_PAGE} effects")
        rows = await self.store.list_outbox(
            statuses=list(dict.fromkeys(statuses)),
            tx_id=transaction_id or None,
            after_id=after_id,
            limit=limit,
            tenant=tenant or self.tenant,
            owner=owner,
        )
        more = len(rows) == limit
        return EffectPage([effect_info(r) for r in rows], rows[-1].id if more else 0)

    async def get(self, effect_id: int, tenant: str | None = None) -> OutboxRow:
        _check_id(effect_id)
        rows = await self.store.list_outbox(ids=[effect_id], tenant=tenant or self.tenant, limit=1)
        if not rows:
            raise NotFound(f"no effect {effect_id}")
        return rows[0]

    async def retry_effect(self, effect_id: int, tenant: str | None = None) -> EffectInfo:
        """``tenant``: the caller's (server mode), else the engine's own."""
        row = await self.get(effect_id, tenant)
        if row.status != "dead" or not await self.store.requeue_outbox(effect_id, now=self.clock()):
            current = (await self.get(effect_id, tenant)).status
            raise FailedPrecondition(
                f"effect {effect_id} is {current}, not dead; only dead effects can be retried"
                + (" (it is queued already)" if current in ("pending", "delivering") else "")
            )
        claimed = await self.store.claim_outbox(
            now=self.clock(), lease_secs=self.dispatcher.lease_secs, limit=1, ids=[effect_id]
        )
        if claimed:  # else the background loop took it first: it is being sent
            await leave_eager()  # the channel's code binds to the running task (timeouts)
            await self.dispatcher.deliver_now(claimed)
        return effect_info(await self.get(effect_id, tenant))


def effect_info(row: OutboxRow) -> EffectInfo:
    return EffectInfo(
        effect_id=row.id,
        transaction_id=row.tx_id,
        step_id=row.step_id,
        channel=row.channel,
        idempotency_key=row.idempotency_key,
        status=row.status,
        attempts=row.attempts,
        last_error=row.last_error,
        created_at=row.created_at,
        next_attempt_at=row.next_attempt_at,
        delivered_at=row.delivered_at,
        payload_json=row.payload_json,
    )


def _check_id(effect_id: int) -> None:
    if isinstance(effect_id, bool) or not isinstance(effect_id, int):
        raise InvalidArgument(f"effect_id must be an integer, got {type(effect_id).__name__}")
    if not 1 <= effect_id <= MAX_EFFECT_ID:
        raise InvalidArgument(f"effect_id must be 1..{MAX_EFFECT_ID}, got {effect_id}")
