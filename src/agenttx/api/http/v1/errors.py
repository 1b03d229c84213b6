"""Refused HTTP calls → one JSON shape, the same for every route:

    {"error": {"code": "FAILED_PRECONDITION",   # the gRPC status name (agenttx.errors)
               "reason": "WRONG_STEP",          # the error's own stable name
               "message": "...",                # for humans; may be reworded
               "details": {"expected": 3, ...}, # the error's data fields, as gRPC sends them
               "continuation": {"kind": "CallTool", "instruction": "...",
                                "operation": "POST /v1/transactions/tx_1/steps"}}}

Every field comes from the call's public error (``api/public_errors.py``, the same form every
surface renders): the HTTP status from the one table in ``agenttx.errors`` (wrong step,
conflicts → 409, not found → 404, invalid → 400, internal → 500 with only
``details.correlation_id``); the continuation is the one every surface gives
(``continuations``), its next calls named by HTTP route (``operation``, or ``operations`` to
choose from, and in the instruction): the operations table's routes (``next_calls``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from agenttx.api.continuations import revise
from agenttx.api.http.v1.operations import OPERATIONS
from agenttx.api.http.v1.safety_operations import SAFETY_OPERATIONS
from agenttx.api.next_calls import http_calls
from agenttx.api.operations import ROWS
from agenttx.api.public_errors import PublicError, guidance, internal_error, public_error
from agenttx.errors import TooManySubscribers
from agenttx.redaction import redact

log = logging.getLogger("agenttx.http")

# The next calls of a continuation, by route: each row's first (a row without one: its RPC).
HTTP_CALLS = http_calls(
    {
        op.row.name: f"{op.method} {op.path}"
        for op in (*OPERATIONS, *SAFETY_OPERATIONS)
        if op.operation_id == op.row.rpc
    },
    {row.name: row.rpc for row in ROWS},
)

# The statuses an error body can come with, for the OpenAPI document.
ERROR_STATUSES = (400, 401, 403, 404, 409, 413, 415, 500, 503, 504, 507)


def error_body(
    code: str,
    reason: str,
    message: str,
    continuation: dict[str, Any],
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "reason": reason,
            "message": message,
            "details": details or {},
            "continuation": continuation,
        }
    }


def refusal_response(
    exc: Exception, arguments: dict[str, Any], where: str = "HTTP", operation: str = ""
) -> JSONResponse:
    """The response of a call that raised ``exc``, in its public form
    (``api/public_errors.py``): a refusal's status and body, or an internal error's 500 (its
    text logged once, never sent). ``arguments`` are the call's (its path's transaction id
    among them), which the continuation quotes; ``where`` names the operation in the log,
    ``operation`` is its row's name ("" for a stream)."""
    e = public_error(exc, log, where)
    response = JSONResponse(_body(e, arguments, operation), status_code=e.http_status)
    if isinstance(exc, TooManySubscribers):  # busy, not wrong: say when to try again
        response.headers["retry-after"] = str(-(-exc.retry_after_ms // 1000))
    return response


def refusal_body(exc: Exception, arguments: dict[str, Any]) -> dict[str, Any]:
    """The error body of ``exc`` (a refused call's, or an event stream's last event)."""
    return _body(public_error(exc, log, "an event stream"), arguments)


def _body(e: PublicError, arguments: dict[str, Any], operation: str = "") -> dict[str, Any]:
    r = guidance(e, operation, arguments, HTTP_CALLS)
    return error_body(e.grpc_status, e.reason, e.message, r.continuation, _jsonable(e.fields))


def invalid_response(message: str, status: int = 400) -> JSONResponse:
    """A request the adapter cannot use (bad JSON, wrong field type, too large …); the message
    may quote the request, so its secrets are masked."""
    message = redact(message)
    return JSONResponse(
        error_body(
            "INVALID_ARGUMENT",
            "INVALID_ARGUMENT",
            message,
            revise(f"Fix the request and send it again: {message}"),
        ),
        status_code=status,
    )


def internal_response(exc: BaseException, where: str) -> JSONResponse:
    """The 500 of an exception ``where`` raised that is no refusal (logged once, here)."""
    e = internal_error(exc, log, where)
    return JSONResponse(_body(e, {}), status_code=e.http_status)


def plain_error(status: int, code: str, reason: str, message: str) -> JSONResponse:
    """An error the HTTP layer itself answers (no route, wrong method, unauthenticated)."""
    return JSONResponse(
        error_body(code, reason, message, revise(message)),
        status_code=status,
    )


def _jsonable(details: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v if isinstance(v, str | int | float | bool | list) else str(v)
        for k, v in details.items()
    }
