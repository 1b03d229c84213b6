"""The one JSON acceptance policy: what JSON AgentTx takes in at its boundary.

Every JSON value that enters the system — a step's arguments (text from gRPC, text or a dict
from the embedded API), the arguments once references are resolved, a tool's output — is held
to the same rules before anything is stored or built from it:

=====================  ======================================================================
rule                   why
=====================  ======================================================================
depth <= 64            deeper values exhaust recursive code (encoders, validators, drivers)
integers <= 100 digits Python refuses to convert past 4,300, and no id or count needs more
finite numbers         ``NaN``/``Infinity`` (and ``1e400``, which parses to infinity) are not
                       JSON; stored, they would make the stored text unreadable to others
valid UTF-8 strings    a lone surrogate (``"\\ud800"``) cannot be stored or sent (keys too)
keys are strings       (Python values only) JSON objects have text keys
=====================  ======================================================================

``parse`` reads JSON text under the policy; ``check`` holds a Python value (and its compact
text) to it. Both raise ``JsonRefused`` naming the rule; callers turn it into a step failure
(arguments an agent sent) or ``InvalidArgument`` (a bad value from an embedded caller).

Cost: the common case (a short flat object) pays a few string tests; a longer text one regex
scan and two counts. Only a text that could break a rule (many brackets, a long digit run, a
surrogate escape) or a Python value with nested containers is walked, iteratively, so no
depth exhausts the stack.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "JsonRefused",
    "check",
    "parse",
    "refusal",
]

MAX_DEPTH = 64  # containers inside containers; the top-level object is depth 1
MAX_INT_DIGITS = 100  # decimal digits of an integer, sign not counted


class JsonRefused(ValueError):
    """JSON outside the policy; ``rule`` names the limit (``json_syntax``, ``json_depth``,
    ``json_integer_digits``, ``json_finite_numbers``, ``json_utf8``, ``json_keys``,
    ``json_type``), and the message names it too, for the hint."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


# Anything in a JSON text that could break a rule other than depth or finiteness (those are
# caught by the decoder's hooks and the encoder): a surrogate escape, or a run of digits
# longer than an integer may be (inside strings too: that only costs a walk finding nothing).
# Found without a regex over the digits: ``[0-9]{101}`` restarts at every digit of a run and
# reads it again (1 MiB of 99 digits and a letter, repeated: 154 ms of CPU, holding the
# interpreter). Digits become "0" and all else " " (one ``bytes.translate``), then one
# substring search finds a run; the escape regex starts with a literal, and runs only where
# ``\u`` occurs. Long texts go in slices so no single C call holds the interpreter long.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_DIGIT_RUN = b"0" * (MAX_INT_DIGITS + 1)
_SCAN_SLICE = 256 << 10
_SCAN_OVERLAP = MAX_INT_DIGITS + 8  # a run or an escape cut by a slice's end is whole in the next
_SURROGATE = re.compile("[\ud800-\udfff]")
# A text this short can neither nest deeper than MAX_DEPTH nor hold a too-long integer.
_SHORT = min(2 * MAX_DEPTH, MAX_INT_DIGITS)


def _refuse_constant(name: str) -> Any:
    raise JsonRefused(
        "json_finite_numbers",
        f"{name} is not a JSON number (json_finite_numbers); send a finite number or null",
    )


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e400: a literal past the float range
        raise JsonRefused("json_finite_numbers", _finite_message())
    return number


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def parse(text: str) -> Any:
    """The value of JSON ``text`` under the policy; ``JsonRefused`` otherwise (``json_syntax``
    for text that is not JSON at all, its message the decoder's)."""
    if text.startswith("\ufeff"):
        raise JsonRefused(
            "json_syntax", "the JSON starts with a byte order mark (U+FEFF); send it without one"
        )
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise JsonRefused("json_syntax", str(exc)) from None
    except RecursionError:
        raise JsonRefused("json_depth", _depth_message()) from None
    except JsonRefused:
        raise
    except ValueError:  # int(): more digits than Python converts
        raise JsonRefused("json_integer_digits", _integer_message()) from None
    check(value, text, parsed=True)
    return value


def check(value: Any, text: str, *, parsed: bool = False) -> int:
    """Raise ``JsonRefused`` unless ``value``, whose JSON text is ``text`` (as sent, or as
    ``jsontext.compact`` wrote it, which refuses non-finite numbers itself), keeps the policy;
    returns the text's size in UTF-8 bytes. ``parsed``: ``value`` was just parsed from
    ``text`` by ``parse`` (so its keys are strings and its numbers finite)."""
    if text.isascii():  # O(1) in CPython: the string knows
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise JsonRefused("json_utf8", _utf8_message()) from None
    if size > _SHORT:
        if text.count("[") + text.count("{") > MAX_DEPTH or _suspect(text):
            _walk(value)
            return size
    elif "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None:
        _walk(value)
        return size
    if not parsed:
        if type(value) is dict:
            # A flat dict's keys are checked here; with a container inside, everything is
            # walked (a nested non-string key is written as a string: its text looks fine).
            for key, child in value.items():
                if type(key) is not str:
                    raise JsonRefused("json_keys", _key_message(key))
                if isinstance(child, dict | list):
                    _walk(value)
                    break
        elif isinstance(value, list):
            _walk(value)
    return size


def refusal(value: Any) -> JsonRefused | None:
    """The policy rule a Python value breaks, found by walking it (``None`` if it breaks
    none), for a value its encoder already refused: the refusal then names the rule (a NaN is
    ``json_finite_numbers``, a set ``json_type``, a value containing itself ``json_depth``)
    rather than the encoder's words. The walk stops at the depth limit, so a cycle ends."""
    try:
        _walk(value)
    except JsonRefused as exc:
        return exc
    return None


def _suspect(text: str) -> bool:
    """Whether ``text`` (valid UTF-8) holds a surrogate escape or a run of more than
    ``MAX_INT_DIGITS`` digits; linear in its length, slice by slice."""
    for start in range(0, len(text), _SCAN_SLICE):
        data = text[max(start - _SCAN_OVERLAP, 0) : start + _SCAN_SLICE].encode()
        if _DIGIT_RUN in data.translate(_DIGITS_AS_ZERO):
            return True
        if b"\\u" in data and _SURROGATE_ESCAPE_BYTES.search(data) is not None:
            return True
    return False


def _walk(value: Any) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item) is not None:
                raise JsonRefused("json_utf8", _utf8_message())
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            # 332 bits hold every 100-digit number; past 400 bits there are more than 120.
            bits = item.bit_length()
            if bits > 332 and (bits > 400 or len(str(abs(item))) > MAX_INT_DIGITS):
                raise JsonRefused("json_integer_digits", _integer_message())
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise JsonRefused("json_finite_numbers", _finite_message())
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise JsonRefused("json_depth", _depth_message())
            if isinstance(item, dict):
                for key, child in item.items():
                    if type(key) is not str:
                        raise JsonRefused("json_keys", _key_message(key))
                    if _SURROGATE.search(key) is not None:
                        raise JsonRefused("json_utf8", _utf8_message())
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        else:
            raise JsonRefused("json_type", f"{type(item).__name__} is not a JSON type (json_type)")


def _finite_message() -> str:
    return "a number is out of range: infinite or NaN (json_finite_numbers); send a finite number"


def _depth_message() -> str:
    return f"the JSON is nested deeper than {MAX_DEPTH} levels (json_depth); send a flatter value"


def _integer_message() -> str:
    return (
        f"an integer has more than {MAX_INT_DIGITS} digits (json_integer_digits); send it as a "
        "string or a smaller number"
    )


def _utf8_message() -> str:
    return (
        "a string is not valid UTF-8: it holds a lone surrogate such as \\ud800 (json_utf8); "
        "send text only, or encode binary data (base64)"
    )


def _key_message(key: Any) -> str:
    return f"an object key is not a string but {type(key).__name__} (json_keys); JSON keys are text"
