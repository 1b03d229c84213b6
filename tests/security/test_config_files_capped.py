"""The gateway and policy files are read at most one byte past their limit: a FIFO or a device
(whose size says 0) is refused with the limit named instead of being read without end."""

from __future__ import annotations

import pytest

from agenttx.core.safety import load_safety_policy
from agenttx.errors import StartupError
from agenttx.gateway.config import load_gateway


@pytest.mark.parametrize(
    ("load", "flag"), [(load_gateway, "--gateway"), (load_safety_policy, "--policy")]
)
def test_an_endless_file_is_refused_with_the_limit(load: object, flag: str) -> None:
    with pytest.raises(StartupError) as refused:
        load("/dev/zero")  # type: ignore[operator]
    assert f"{flag} /dev/zero: it holds more than 1048576 bytes" in str(refused.value)
