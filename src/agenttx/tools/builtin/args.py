"""Argument checks worded like the reference's (serde) errors, which clients already parse."""

from __future__ import annotations

import json
import re
from typing import Any

from agenttx.errors import ArgumentError

_IDENT = re.compile(r"[A-Za-z0-9_]{1,128}")


# A built-in's argument is missing, of the wrong type or out of its range: the tree's
# ArgumentError, like a schema's refusal. The step's own input is at fault, so the controller
# retries the step (its hint says what to fix) instead of undoing the steps before it.
ToolArgumentError = ArgumentError


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def as_object(arguments: Any) -> dict[str, Any]:
    # The reference accepts non-object arguments and then reports the first missing field.
    return arguments if isinstance(arguments, dict) else {}


def required_str(args: dict[str, Any], name: str) -> str:
    value = optional_str(args, name)
    if value is None:
        raise ToolArgumentError(f"missing field `{name}`")
    return value


def optional_str(args: dict[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolArgumentError(
            f"invalid type: {json_type(value)} for field `{name}`, expected a string"
        )
    return value


# The schema of an argument ``identifier`` checks (a table, a channel): the same rule, so a
# client validating against the schema is refused exactly when the tool would refuse.
SCHEMA_IDENTIFIER = {"type": "string", "pattern": f"^{_IDENT.pattern}$"}


def identifier(value: str, what: str) -> str:
    if not _IDENT.fullmatch(value):
        raise ToolArgumentError(f"invalid {what} `{value}`: expected 1-128 chars of [A-Za-z0-9_]")
    return value


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# The longest state key the engine stores (``agenttx.core.limits.MAX_STATE_KEY_BYTES``, which
# this layer may not import; tests/security/test_hardening_small.py keeps the two equal).
MAX_KEY_BYTES = 1024

SCHEMA_KEY = {"type": "string", "minLength": 1, "maxLength": MAX_KEY_BYTES}
