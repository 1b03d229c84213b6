"""The HTTP/JSON API's operations, derived from the operation table (``agenttx.api.operations``):
each ``/v1`` route of a row is one ``Operation``. The routes (``routes.py``) and the OpenAPI
document (``openapi.py``) are both built from ``OPERATIONS`` (and ``SAFETY_OPERATIONS``), so
adding an operation is adding its row there.

A request becomes the row's request message (``request_of``), the one type every surface
builds: the path's parameters, then the validated body and query, field by name. A JSON value
where the wire has text (``arguments`` → ``arguments_json``, ``output`` → ``output_json``) goes
as its JSON text, as gRPC sends it, so the JSON policy judges it inside the engine (a breach
in a step's arguments is a failed step with a hint, not a 400).

Replies are the rows' reply messages read back as JSON (``agenttx.api.fields``): the wire's
field names, ``*_json`` text fields parsed into a field without the suffix (``output_json`` →
``output``), enums by their short names (``SUCCESS``, as the MCP adapter and the reference's
MCP server name them). A step reply names every strategy (an HTTP client reads names, so
``RETRY`` is never downgraded to the reference's vocabulary).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message
from pydantic import BaseModel

from agenttx.api.operations import TRANSACTION_ROWS, HttpRoute, Row
from agenttx.api.operations.bodies import TRANSACTION_ID_PATTERN
from agenttx.api.operations.filters import StatusFilter
from agenttx.api.operations.requests import refuse_clash, set_field
from agenttx.core.limits import MAX_TRANSACTION_ID_BYTES
from agenttx.core.offload import INLINE_JSON_CHARS, by_size
from agenttx.errors import InvalidArgument, clip
from agenttx.numbers import EFFECT_ID, STEP_ID, WholeNumber


@dataclass(frozen=True)
class Operation:
    """One ``/v1`` route of one row of the operation table."""

    row: Row
    route: HttpRoute

    @property
    def operation_id(self) -> str:
        return self.route.operation_id or self.row.rpc

    @property
    def method(self) -> str:
        return self.route.method

    @property
    def path(self) -> str:
        return self.route.path


def http_operations(rows: Iterable[Row]) -> tuple[Operation, ...]:
    """Every ``/v1`` route of ``rows``, in their order."""
    return tuple(Operation(row, route) for row in rows for route in row.http)


OPERATIONS = http_operations(TRANSACTION_ROWS)

# The path parameters that are numbers: the operations read them with these ranges and the
# OpenAPI document states the same ranges.
PATH_NUMBERS: dict[str, WholeNumber] = {"step_id": STEP_ID, "effect_id": EFFECT_ID}


# Every other path parameter is a transaction id: "tx_" and 32 hex digits. A path's id must be
# visible ASCII within the engine's limit, the pattern the document states, checked by the
# routes with the same expression before the engine sees it (``path_refusal``); such an id
# the store lacks is a 404.
_TRANSACTION_ID_REGEX = re.compile(TRANSACTION_ID_PATTERN)
TRANSACTION_ID_SCHEMA = {
    "type": "string",
    "pattern": f"^{TRANSACTION_ID_PATTERN}$",
    "description": "a transaction id (tx_ and 32 hex digits)",
}


def path_refusal(path: dict[str, str]) -> str | None:
    """Why a path's transaction id names no transaction of any shape (None: it may)."""
    text = path.get("transaction_id")
    if text is None or _TRANSACTION_ID_REGEX.fullmatch(text):
        return None
    return (
        f"transaction_id {clip(text, 40)!r} is not a transaction id: ids are 1.."
        f"{MAX_TRANSACTION_ID_BYTES} visible ASCII characters (tx_ and 32 hex digits)"
    )


def path_number(name: str, text: str) -> int:
    """A path's step or effect id: a decimal number in the field's range."""
    number = PATH_NUMBERS[name]
    if text[:1] in "+- ":  # a path segment spells the number exactly
        raise number.refusal(text)
    return number.parse(text)


async def request_of(
    op: Operation, path: dict[str, str], body: BaseModel | None, query: BaseModel | None, size: int
) -> Message:
    """The row's request message of one HTTP request: the path's parameters, then the body's
    and the query's fields. ``size``: the body's bytes, which decide whether a JSON value's
    text is made on a worker thread (as its parse was)."""
    request = op.row.request()
    fields = request.DESCRIPTOR.fields_by_name
    for name, text in path.items():
        # A parameter the request has no field for only places the route (RetryEffect's
        # transaction: the engine checks the effect's own).
        if name in fields:
            setattr(request, name, path_number(name, text) if name in PATH_NUMBERS else text)
    for model in (body, query):
        if model is not None:
            refuse_clash(type(request), dict(model))  # or the later would replace the earlier
            await _fill(request, model, size, op.route.statuses)
    return request


async def _fill(
    request: Message, model: BaseModel, size: int, statuses: StatusFilter | None
) -> None:
    fields = request.DESCRIPTOR.fields_by_name
    for name in type(model).model_fields:
        value = getattr(model, name)
        if value is None:  # absent: the wire's default (or an optional field left unset)
            continue
        if name in fields:
            set_field(request, name, value)
        elif f"{name}_json" in fields:
            if getattr(model, f"{name}_json", None) is not None:
                raise InvalidArgument(f"send {name} (an object) or {name}_json (text), not both")
            text = await by_size(size, INLINE_JSON_CHARS, _json_text, value)
            setattr(request, f"{name}_json", text)
        elif name == "status" and statuses is not None:
            request.statuses.extend(statuses.parse(value))  # type: ignore[attr-defined]
        else:  # a model field the wire lacks is a bug of the table, not of the request
            raise TypeError(f"{type(model).__name__}.{name}: no field of {request.DESCRIPTOR.name}")


def _json_text(value: Any) -> str:
    # json.dumps, not jsontext.compact: a NaN the body's parser let through must reach the
    # engine as text, where the JSON policy fails the step with a hint (compact would raise).
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
