"""The effects RPCs' messages, to and from ``agenttx.types.EffectInfo`` (the same value the
embedded engine's ``list_effects`` and ``retry_effect`` return)."""

from __future__ import annotations

from collections.abc import Sequence

from agenttx.types import EffectInfo, EffectPage
from agenttx.wire import agenttx_pb2 as pb


def list_request(
    statuses: Sequence[str], transaction_id: str, after_id: int, page_size: int
) -> pb.ListEffectsRequest:
    return pb.ListEffectsRequest(
        statuses=list(statuses),
        transaction_id=transaction_id,
        after_id=after_id,
        page_size=page_size,
    )


def effect(m: pb.EffectRecord) -> EffectInfo:
    return EffectInfo(
        effect_id=m.effect_id,
        transaction_id=m.transaction_id,
        step_id=m.step_id,
        channel=m.channel,
        idempotency_key=m.idempotency_key,
        status=m.status,
        attempts=m.attempts,
        last_error=m.last_error,
        created_at=m.created_at,
        next_attempt_at=m.next_attempt_at,
        delivered_at=m.delivered_at,
        payload_json=m.payload_json,
    )


def page(r: pb.ListEffectsResponse) -> EffectPage:
    return EffectPage([effect(m) for m in r.effects], r.next_after_id)
