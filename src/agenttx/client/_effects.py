"""The effects RPCs' messages, to and from ``agenttx.types.EffectInfo`` (the same value the
embedded engine's ``list_effects`` and ``retry_effect`` return)."""

from __future__ import annotations

from collections.abc import Sequence

from agenttx.fieldcopy import field_copy
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
    return field_copy(m, EffectInfo)


def page(r: pb.ListEffectsResponse) -> EffectPage:
    return EffectPage([effect(m) for m in r.effects], r.next_after_id)
