"""Compact JSON text, the one way AgentTx writes JSON it stores or compares.

One encoder instance serves every call: ``json.dumps`` builds a new encoder per call, which
costs more than encoding a small object (measured on the step path).
"""

from __future__ import annotations

import json
from typing import Any

_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def compact(value: Any) -> str:
    """``value`` as compact JSON; raises ``TypeError``/``ValueError`` for non-JSON (NaN too)."""
    return _COMPACT.encode(value)
