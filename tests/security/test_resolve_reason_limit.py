"""An operator's reason for settling a step (``resolve_step``) is bounded like every reason a
person gives (4096 bytes), at the boundary: before the transaction is even looked at."""

from __future__ import annotations

import pytest

import agenttx
from agenttx.errors import InvalidArgument


async def test_an_over_long_resolve_reason_is_refused_naming_the_limit(
    engine: agenttx.Engine,
) -> None:
    tx = (await engine.begin()).transaction_id
    with pytest.raises(InvalidArgument) as refused:
        await engine.resolve_step(tx, 1, "happened", reason="é" * 2049)  # 4,098 bytes
    assert "reason is 4098 bytes, over the limit of 4096" in str(refused.value)
