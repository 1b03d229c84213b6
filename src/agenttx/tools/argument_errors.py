"""What an agent reads when a tool's arguments are wrong: one sentence per problem that names
the argument, what was expected and what the tool accepts, instead of pydantic's report with
its documentation links.

The wording is read back by the hint rules (``core/hints/hint_rules.toml``, section "tool
arguments"); change both together. Each message starts with the problem's kind, so the first
problem decides the hint's category:

    unexpected argument 'ttl'; kv.put accepts: key, value
    unexpected argument 'emial'; did you mean 'email'? crm.create accepts: email, name
    missing argument 'email' (string); crm.create accepts: email, name
    argument 'age' of people.add has the wrong type: expected a valid integer, got string 'x'
    argument 'qty' of shop.order is out of range: expected greater than 0, got -1

Suggestions use ``difflib`` on the tool's own argument names (a tool has tens of them, so
this costs microseconds); tool names have their own, bounded, lookup in the registry.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agenttx.plural import plural

__all__ = [
    "MAX_LISTED_NAMES",
    "accepted_list",
    "closest_names",
    "describe_validation_errors",
    "unexpected_argument",
]

# A tool with more arguments than this lists the first ones and says how many more: the hint
# is cut at 240 characters anyway, and the message should stay one readable line.
MAX_LISTED_NAMES = 20
# difflib's ratio at or above which a name counts as a likely typo of another (its default).
_CLOSE = 0.6
# Problems reported per message: the first decides the category, a few more save the agent a
# round trip, and a model with hundreds of bad fields must not give a message of kilobytes.
_MAX_PROBLEMS = 3
_MAX_VALUE_CHARS = 60

# pydantic error types, by the kind of problem they are (pydantic_core's ErrorType names).
_RANGE_TYPES = frozenset(
    {
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "multiple_of",
        "finite_number",
        "too_short",
        "too_long",
        "string_too_short",
        "string_too_long",
        "bytes_too_short",
        "bytes_too_long",
        "string_pattern_mismatch",
        "literal_error",
        "enum",
        "decimal_max_digits",
        "decimal_max_places",
        "decimal_whole_digits",
        "date_past",
        "date_future",
        "datetime_past",
        "datetime_future",
    }
)


def closest_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``candidates`` that look like a typo of ``name``, closest first."""
    return difflib.get_close_matches(name, list(candidates), n=n, cutoff=_CLOSE)


def accepted_list(names: Sequence[str], empty: str = "(no arguments)") -> str:
    """``a, b, c`` — or the first ``MAX_LISTED_NAMES`` and how many more; ``empty`` if none."""
    if not names:
        return empty
    shown = ", ".join(names[:MAX_LISTED_NAMES])
    rest = len(names) - MAX_LISTED_NAMES
    return f"{shown}, … ({rest} more)" if rest > 0 else shown


def unexpected_argument(tool: str, name: str, accepted: Sequence[str]) -> str:
    """The message for an argument ``tool`` does not declare."""
    close = closest_names(name, accepted, n=1)
    suggestion = f" did you mean '{close[0]}'?" if close else ""
    return (
        f"unexpected argument '{_short(name)}';{suggestion} "
        f"{tool} accepts: {accepted_list(accepted)}"
    )


def describe_validation_errors(
    tool: str,
    errors: Sequence[Mapping[str, Any]],
    accepted: Sequence[str],
    expected_types: Mapping[str, str],
) -> str:
    """One message for pydantic's ``ValidationError.errors()`` of ``tool``'s input model.

    ``expected_types`` names each argument's JSON type (``string``, ``integer``, …), shown for a
    missing argument, where pydantic has no wording of its own."""
    parts = [_describe(tool, e, accepted, expected_types) for e in errors[:_MAX_PROBLEMS]]
    more = len(errors) - _MAX_PROBLEMS
    if more > 0:
        parts.append(f"and {plural(more, 'more problem')}")
    return "; ".join(parts) if parts else f"invalid arguments for tool {tool}"


def _describe(
    tool: str,
    error: Mapping[str, Any],
    accepted: Sequence[str],
    expected_types: Mapping[str, str],
) -> str:
    kind = str(error.get("type", ""))
    loc = tuple(error.get("loc", ()))
    name = str(loc[0]) if loc else ""
    where = _location(loc)
    if kind == "extra_forbidden" and len(loc) == 1:
        return unexpected_argument(tool, name, accepted)
    if kind == "missing" and len(loc) == 1:
        declared = expected_types.get(name, "")
        typed = f" ({declared})" if declared else ""
        accepts = accepted_list(accepted)
        return f"missing argument '{_short(name)}'{typed}; {tool} accepts: {accepts}"
    expected = _expected(str(error.get("msg", "")))
    got = _got(error.get("input"))
    if not loc:
        return f"the arguments of {tool} must be a JSON object, got {got}"
    if kind == "missing":
        return f"argument '{where}' of {tool} is missing a required field"
    if kind == "extra_forbidden":
        return f"argument '{where}' of {tool} has an unexpected field"
    if kind in _RANGE_TYPES:
        return f"argument '{where}' of {tool} is out of range: expected {expected}, got {got}"
    return f"argument '{where}' of {tool} has the wrong type: expected {expected}, got {got}"


def _location(loc: tuple[Any, ...]) -> str:
    # ('customer', 'address', 0, 'zip') -> customer.address[0].zip
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return _short(out)


def _expected(msg: str) -> str:
    # pydantic says "Input should be a valid integer, unable to parse string as an integer":
    # the part after "should be" (or "should have") and before the comma is the expectation.
    for lead in _EXPECTATION_LEADS:
        if msg.startswith(lead):
            rest = msg[len(lead) :].removeprefix("be ").removeprefix("have ")
            return _short(rest.split(", ", 1)[0].rstrip("."))
    return _short(msg.rstrip(".")) or "another value"


_EXPECTATION_LEADS = ("Input should ", "Value should ", "String should ", "List should ")


def _got(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string '{_short(value)}'"
    if isinstance(value, list | tuple):
        return f"an array of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 1] + "…"
