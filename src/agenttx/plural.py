"""A count and its noun as a message reads them: ``plural(1, "step")`` is "1 step",
``plural(3, "step")`` "3 steps"; ``named("field", ["a", "b"])`` is "fields a, b". Every
message of the CLI, the server and the surfaces whose count can be 1 says it through these,
so none reads "1 steps" or "field(s)". Imports nothing."""

from __future__ import annotations

from collections.abc import Sequence


def plural(count: int, noun: str, many: str = "") -> str:
    """``count`` and ``noun``, or ``many`` (default: ``noun`` + "s") unless ``count`` is 1."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def named(noun: str, names: Sequence[str], many: str = "") -> str:
    """``noun`` (or ``many``, as ``plural`` picks it) followed by ``names``, comma-separated."""
    return f"{noun if len(names) == 1 else many or noun + 's'} {', '.join(names)}"


__all__ = ["named", "plural"]
