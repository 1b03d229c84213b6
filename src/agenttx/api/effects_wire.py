"""Effects on the wire: ``ListEffects`` and ``RetryEffect`` messages from the engine's
values. A page stops before ``PAGE_BYTES`` so it always fits the 4 MiB message limit (a
payload may be up to a step's argument limit)."""

from __future__ import annotations

from collections.abc import Sequence

from agenttx.errors import InvalidArgument
from agenttx.fieldcopy import field_copy
from agenttx.types import EffectInfo
from agenttx.wire import agenttx_pb2 as pb

DEFAULT_EFFECTS, MAX_EFFECTS = 100, 1000
PAGE_BYTES = 3 * 1024 * 1024


def effects_per_page(page_size: int) -> int:
    if page_size > MAX_EFFECTS:
        raise InvalidArgument(f"page_size {page_size} is over the limit of {MAX_EFFECTS} effects")
    return page_size or DEFAULT_EFFECTS


def record(e: EffectInfo) -> pb.EffectRecord:
    return field_copy(e, pb.EffectRecord)


def effects_page(effects: Sequence[EffectInfo], next_after_id: int) -> pb.ListEffectsResponse:
    """As many of ``effects`` as fit ``PAGE_BYTES``; a cut page continues after its last."""
    page = pb.ListEffectsResponse()
    size = 0
    for e in effects:
        msg = record(e)
        size += msg.ByteSize() + 8
        if size > PAGE_BYTES and page.effects:
            page.next_after_id = page.effects[-1].effect_id
            return page
        page.effects.append(msg)
    page.next_after_id = next_after_id
    return page
