"""The audit calls check the transaction id's byte limit at the boundary, like every other call."""

from __future__ import annotations

from typing import Any

import pytest

from agenttx.errors import InvalidArgument


async def test_an_oversized_transaction_id_is_refused_by_the_audit_calls(engine: Any) -> None:
    huge = "t" * 10_000
    with pytest.raises(InvalidArgument, match="over 128 bytes"):
        await engine.verify_audit(huge)
    with pytest.raises(InvalidArgument, match="over 128 bytes"):
        await engine.audit_records(huge)
