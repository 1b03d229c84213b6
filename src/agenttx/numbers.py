"""Whole numbers from outside, read once and bounded, the same on every surface.

A number a caller sends (an MCP argument, an HTTP body or query field, a CLI argument, a
gRPC field) is checked against its field's range here before anything uses it. Text is
measured before ``int()`` sees it: Python refuses to convert past 4,300 digits with a
``ValueError`` that surfaced as INTERNAL, and a bound that fits in 19 digits needs no more.
A float counts only if it is whole (``3.0``), a bool never. Out of range, or no whole number
at all, is ``InvalidArgument`` naming the field and its range:

    step_id must be a whole number from 1 to 4294967295, got '99999999…' (5000 bytes)

``MAX_INT64`` is the most a store's integer column holds (SQLite and PostgreSQL alike): a
gRPC ``uint64`` past it cannot be looked up, so it is refused as out of range.
"""

from __future__ import annotations

from dataclasses import dataclass

from agenttx.errors import InvalidArgument, clip

MAX_UINT32 = (1 << 32) - 1  # a uint32 field on the wire (step ids)
MAX_INT64 = (1 << 63) - 1  # a store's integer (revisions, record sequences, effect ids)


@dataclass(frozen=True, slots=True)
class WholeNumber:
    """One field's range: ``low`` ≤ value ≤ ``high``; ``name`` is how its surface calls it."""

    name: str
    low: int
    high: int

    def refusal(self, got: object) -> InvalidArgument:
        return InvalidArgument(
            f"{self.name} must be a whole number from {self.low} to {self.high}, got {_shown(got)}"
        )

    def check(self, value: int) -> int:
        """``value`` (an ``int`` already, e.g. a protobuf field) if it is in range."""
        if not self.low <= value <= self.high:
            raise self.refusal(value)
        return value

    def parse(self, value: object) -> int:
        """``value`` read leniently, as models send numbers: an ``int``, a whole ``float``, or
        decimal text (ASCII digits, an optional sign, spaces around); else the refusal."""
        if isinstance(value, bool):
            raise self.refusal(value)
        if isinstance(value, int):
            return self.check(value)
        if isinstance(value, float):
            # Compared as a float first: int() of 1e308 would build a 309-digit number.
            if value.is_integer() and self.low <= value <= self.high:
                return self.check(int(value))
            raise self.refusal(value)
        if isinstance(value, str):
            text = value.strip()
            digits = text[1:] if text[:1] in "+-" else text
            # The length first, in bytes of ASCII: no int() of a long or non-ASCII text.
            if 0 < len(digits) <= _MAX_DIGITS and digits.isascii() and digits.isdigit():
                return self.check(int(text))
            raise self.refusal(value)
        raise self.refusal(value)


# Every bound above has at most 19 digits; a few more let a leading zero or two through and
# are still far from int()'s 4,300.
_MAX_DIGITS = 24


@dataclass(frozen=True, slots=True)
class LongInteger:
    """A JSON integer too long to be any field's number, kept by its size only: what a
    lenient JSON reader (``json_integer``) puts where ``int()`` would fail or be slow. No
    field takes it, so it is refused as that field's wrong type."""

    digits: int


def json_integer(text: str) -> int | LongInteger:
    """An integer literal of JSON text (``json.loads(parse_int=…)``), bounded before int()."""
    if len(text) > _MAX_DIGITS + 1:  # + 1: a sign
        return LongInteger(len(text.lstrip("+-")))
    return int(text)


def _shown(value: object) -> str:
    """What the caller sent, briefly: a long text clipped, a huge integer by its size."""
    if isinstance(value, LongInteger):
        return f"an integer of {value.digits} digits"
    if isinstance(value, str):
        return repr(clip(value, 24))
    if isinstance(value, bool | float) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 80:  # str() of a huge int is slow, and past 4,300 digits fails
            return f"an integer of {value.bit_length()} bits"
        return str(value)
    return f"a {type(value).__name__}"


# The fields every surface shares, by their wire names.
STEP_ID = WholeNumber("step_id", 1, MAX_UINT32)
TO_STEP = WholeNumber("to_step", 0, MAX_UINT32)
EXPECTED_REVISION = WholeNumber("expected_revision", 1, MAX_INT64)
AFTER_REVISION = WholeNumber("after_revision", 0, MAX_INT64)
AFTER_SEQ = WholeNumber("after_seq", 0, MAX_INT64)
AFTER_ID = WholeNumber("after_id", 0, MAX_INT64)
EFFECT_ID = WholeNumber("effect_id", 1, MAX_INT64)
# Page sizes differ per listing; 0 asks for the listing's default where the wire allows it.
TRANSACTIONS_PAGE = WholeNumber("page_size", 0, 500)
EFFECTS_PAGE = WholeNumber("page_size", 0, 1000)
