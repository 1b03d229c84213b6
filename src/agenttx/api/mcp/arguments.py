"""A tool call's arguments, read by one table: for each MCP tool, the arguments its handler
uses, in the order they are checked, each with its kind.

Inputs are declared strictly in the schemas (``catalog.py``) and read leniently here: models
often send a number as text or an object as JSON text, and refusing that would only cost
them a turn. The kinds:

    text      a string; missing: "" (required: refused, and so is "")
    number    a bounded whole number (``agenttx.numbers``: an int, a whole float or digits);
              missing or "": None (required: refused)
    flag      true/false, or their text; missing: false
    strings   a list of strings, or one comma-separated string; missing: []
    json      a JSON object, or its text (parsed in the step); missing: None

Anything else is a ``BadArgument`` naming the argument: the call is refused with
INVALID_ARGUMENT and a continuation saying what to fix. ``Arguments.read`` returns every
argument of the tool's row, by name; ``tests/surfaces/test_mcp_arguments.py`` checks each row
against the tool's input schema.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agenttx.errors import InvalidArgument
from agenttx.numbers import (
    AFTER_ID,
    EFFECT_ID,
    EFFECTS_PAGE,
    EXPECTED_REVISION,
    STEP_ID,
    TO_STEP,
    TRANSACTIONS_PAGE,
    WholeNumber,
)


class BadArgument(Exception):
    """An MCP tool argument the adapter cannot use; becomes a ReviseRequest refusal."""


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a tool: ``kind`` reads the value sent (None if absent)."""

    name: str
    kind: str  # text, number, flag, strings or json: the schema types they read
    read: Callable[[Any], Any]


def text(name: str, *, required: bool = False) -> Arg:
    def read(value: Any) -> str:
        if value is None:
            if required:
                raise BadArgument(f"{name} is required")
            return ""
        if not isinstance(value, str):
            raise BadArgument(f"{name} must be a string, got {type(value).__name__}")
        if required and not value:
            raise BadArgument(f"{name} must not be empty")
        return value

    return Arg(name, "text", read)


def number(field: WholeNumber, *, required: bool = False) -> Arg:
    def read(value: Any) -> int | None:
        if value is None or value == "":
            if required:
                raise BadArgument(f"{field.name} is required")
            return None
        try:
            return field.parse(value)  # bounded before int(): a 5,000-digit text is refused
        except InvalidArgument as exc:
            raise BadArgument(exc.message) from None

    return Arg(field.name, "number", read)


def flag(name: str) -> Arg:
    def read(value: Any) -> bool:
        if value is None or isinstance(value, bool):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise BadArgument(f"{name} must be true or false, got {value!r}")

    return Arg(name, "flag", read)


def strings(name: str) -> Arg:
    def read(value: Any) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [v for v in (p.strip() for p in value.split(",")) if v]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise BadArgument(f"{name} must be a list of strings")

    return Arg(name, "strings", read)


def json_object(name: str) -> Arg:
    def read(value: Any) -> dict[str, Any] | str | None:
        if value is not None and not isinstance(value, dict | str):
            raise BadArgument(f"{name} must be a JSON object (or its text)")
        return value

    return Arg(name, "json", read)


_TX = text("transaction_id", required=True)
_RECEIPT = text("receipt_id", required=True)
_PRINCIPAL = text("principal", required=True)
_REASON = text("reason", required=True)
_STEP = number(STEP_ID, required=True)

# Each tool's arguments in the order its handler checks them (the first wrong one is named).
ARGUMENTS: dict[str, tuple[Arg, ...]] = {
    "begin_transaction": (text("goal"), text("agent_id"), text("mode"), text("principal")),
    "run_step": (
        _TX,
        _STEP,
        text("tool", required=True),
        json_object("arguments"),
        flag("dry_run"),
        text("reasoning"),
    ),
    "commit_transaction": (_TX, number(EXPECTED_REVISION), text("receipt_id")),
    "rollback_transaction": (_TX, number(TO_STEP), text("reason")),
    "get_transaction": (_TX, flag("history")),
    "list_tools": (),
    "list_transactions": (
        number(TRANSACTIONS_PAGE),
        strings("status"),
        text("agent_id"),
        text("page_token"),
    ),
    "reconcile_step": (_TX, _STEP),
    "preview_commit": (_TX,),
    "approve_commit": (_TX, _RECEIPT, _PRINCIPAL, strings("roles")),
    "refuse_commit": (_TX, _RECEIPT, _REASON, _PRINCIPAL, strings("roles")),
    "undo_step": (_TX,),
    "redo_step": (_TX,),
    "compensate_transaction": (_TX, flag("preview"), text("reason"), text("principal")),
    "approve_compensation": (_TX, strings("roles"), _PRINCIPAL),
    "refuse_compensation": (_TX, strings("roles"), _REASON, _PRINCIPAL),
    "list_effects": (
        strings("status"),
        text("transaction_id"),
        number(AFTER_ID),
        number(EFFECTS_PAGE),
    ),
    "retry_effect": (number(EFFECT_ID),),
}


@dataclass(frozen=True, slots=True)
class Arguments:
    """A tool call's arguments as sent (``values``: what a refusal and the log quote)."""

    values: dict[str, Any]

    def read(self, tool: str) -> dict[str, Any]:
        """Every argument of ``tool``'s row, by name, read in the row's order."""
        return {arg.name: arg.read(self.values.get(arg.name)) for arg in ARGUMENTS[tool]}
