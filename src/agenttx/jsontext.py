"""Compact JSON text, the one way AgentTx writes JSON it stores or compares.

The text is exactly what ``json.dumps(value, separators=(",", ":"), ensure_ascii=False,
allow_nan=False)`` writes. One C encoder, made once, serves every call: ``json.dumps`` and
``JSONEncoder.encode`` build a new one on each call, which costs as much as encoding the small
objects a step writes (four encodes per step; measured on the step path, ~1 µs each).

The encoder made here keeps no table of the containers it is inside (``markers``), because
that table would be shared by every thread that encodes (sync tools run on worker threads).
So a value that contains itself is not reported by the encoder's own check; it nests until
Python's recursion limit instead, which is turned into the same ``ValueError`` the standard
check raises.

``encoder`` makes the same kind of reusable encoder for the few texts that keep another
``json.dumps`` form because stores hold them already (a request's payload hash, a stored reply).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _encoder
from typing import Any

_STANDARD = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)

# The C accelerator is part of every CPython build; the pure-Python fallback keeps the same
# text where it is missing. (typeshed does not declare it: it is read by name.)
_make_c_encoder: Any = getattr(_encoder, "c_make_encoder", None)
_C_ENCODER = (
    _make_c_encoder(
        None,  # markers: see the module docstring
        _STANDARD.default,  # raises TypeError for values JSON cannot hold
        _encoder.encode_basestring,  # ensure_ascii=False
        None,  # indent
        ":",
        ",",
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan: NaN and ±Infinity raise ValueError
    )
    if _make_c_encoder is not None
    else None
)
_encode_str = _encoder.encode_basestring


def compact(value: Any) -> str:
    """``value`` as compact JSON; raises ``TypeError``/``ValueError`` for non-JSON (NaN too)."""
    if type(value) is str:
        return _encode_str(value)  # the encoder's own fast path for a bare string
    if _C_ENCODER is None:
        return _STANDARD.encode(value)
    try:
        return "".join(_C_ENCODER(value, 0))
    except RecursionError:
        raise ValueError("Circular reference detected (or nesting too deep for JSON)") from None


def encoder(
    *,
    default: Callable[[Any], Any],
    ensure_ascii: bool,
    separators: tuple[str, str],
    sort_keys: bool = False,
    allow_nan: bool = True,
) -> Callable[[Any], str]:
    """One reusable encoder whose text is exactly ``json.dumps(value, default=default,
    ensure_ascii=…, separators=…, sort_keys=…, allow_nan=…)``, for texts that must stay as
    they were written (a request's payload hash, a stored reply) and are made on every call:
    ``json.dumps`` with any of these arguments builds a new encoder each time. Like
    ``compact`` it keeps no table of the containers it is inside (threads share it), so a value
    that contains itself raises ``ValueError`` by way of the recursion limit."""
    item_sep, key_sep = separators
    c_encoder = (
        _make_c_encoder(
            None,
            default,
            _encoder.encode_basestring_ascii if ensure_ascii else _encoder.encode_basestring,
            None,
            key_sep,
            item_sep,
            sort_keys,
            False,
            allow_nan,
        )
        if _make_c_encoder is not None
        else None
    )
    standard = json.JSONEncoder(
        default=default,
        ensure_ascii=ensure_ascii,
        separators=separators,
        sort_keys=sort_keys,
        allow_nan=allow_nan,
    )

    def encode(value: Any) -> str:
        if c_encoder is None or isinstance(value, str):
            return standard.encode(value)  # a bare string: the standard fast path
        try:
            return "".join(c_encoder(value, 0))
        except RecursionError:
            raise ValueError("Circular reference detected (or nesting too deep for JSON)") from None

    return encode
