"""The types the embedded API takes, checked where a call enters the engine.

Over gRPC, protobuf has already typed every field (and decoded every string as UTF-8); an
embedded caller can pass anything. Each public ``Engine`` method checks its arguments here
first, so a wrong type is an ``InvalidArgument`` that names the argument — never a
``TypeError`` from deep inside, a silent conversion (``1.0`` or ``True`` as a step id), or a
store write that fails on a lone surrogate. The checks cost a type test per argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agenttx.errors import InvalidArgument
from agenttx.plural import named

__all__ = [
    "POLICY_KEYS",
    "check_number",
    "check_policy",
    "check_string_map",
    "check_strings",
    "check_text",
]

MAX_WIRE_UINT32 = (1 << 32) - 1  # step ids travel as uint32 on the wire
POLICY_KEYS = ("max_local_depth", "max_global_resets", "replay_budget_factor", "max_step_retries")


def check_text(name: str, value: object) -> str:
    """``value`` if it is text that can be stored (valid UTF-8), else ``InvalidArgument``."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, got {type(value).__name__}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(
                f"{name} is not valid UTF-8 text (it holds a lone surrogate)"
            ) from None
    return value


def check_number(
    name: str, value: object, *, minimum: int = 1, maximum: int = MAX_WIRE_UINT32
) -> int:
    """``value`` if it is an ``int`` (not a bool, not a float) in ``minimum``..``maximum``
    (2³²-1 unless said: a step id's wire type)."""
    if not isinstance(value, int) or isinstance(value, bool):
        # bool is an int subclass, and 1.0 == 1: both would pass a looser check silently.
        raise InvalidArgument(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise InvalidArgument(f"{name} must be >= {minimum}")
    if value > maximum:
        raise InvalidArgument(f"{name} must be <= {maximum}")
    return value


def check_strings(name: str, value: object) -> list[str]:
    """A list or tuple of texts (a single string is refused: it is not a list of labels)."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidArgument(f"{name} must be a list of strings, got {type(value).__name__}")
    return [check_text(f"each of {name}", item) for item in value]


def check_string_map(name: str, value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{name} must be a mapping of strings, got {type(value).__name__}")
    return {
        check_text(f"a {name} key", k): check_text(f"{name}[{str(k)[:40]!r}]", v)
        for k, v in value.items()
    }


def check_policy(policy: Mapping[str, Any]) -> dict[str, Any]:
    """A policy given as a mapping: only its known keys, each an int (or, for the factor, a
    number) or None for the default."""
    if not isinstance(policy, Mapping):
        raise InvalidArgument(
            f"policy must be a RollbackPolicy or a mapping, got {type(policy).__name__}"
        )
    unknown = sorted(str(k)[:40] for k in policy if k not in POLICY_KEYS)
    if unknown:
        raise InvalidArgument(
            f"policy has unknown {named('key', unknown)}; known: {', '.join(POLICY_KEYS)}"
        )
    for key, value in policy.items():
        if value is None:
            continue
        number = int | float if key == "replay_budget_factor" else int
        if isinstance(value, bool) or not isinstance(value, number):
            kind = "a number" if key == "replay_budget_factor" else "an integer"
            raise InvalidArgument(f"policy.{key} must be {kind}, got {type(value).__name__}")
    return dict(policy)
