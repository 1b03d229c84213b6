"""Refused HTTP calls → one JSON shape, the same for every route:

    {"error": {"code": "FAILED_PRECONDITION",   # the gRPC status name (agenttx.errors)
               "reason": "WRONG_STEP",          # the error's own stable name
               "message": "...",                # for humans; may be reworded
               "details": {"expected": 3, ...}, # the error's data fields, as gRPC sends them
               "continuation": {"kind": "CallTool", "instruction": "...",
                                "operation": "POST /v1/transactions/tx_1/steps"}}}

The HTTP status comes from the one table in ``agenttx.errors`` (wrong step, conflicts → 409,
not found → 404, invalid → 400 …); the continuation is the one every surface gives
(``continuations``), its next calls named by HTTP route (``operation``, or ``operations`` to
choose from, and in the instruction): the operations table's routes (``next_calls``).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.responses import JSONResponse

from agenttx.api.continuations import refusal_of, resolve_externally, revise
from agenttx.api.next_calls import http_calls
from agenttx.api.v1.operations import OPERATIONS
from agenttx.api.v1.safety_operations import SAFETY_OPERATIONS
from agenttx.errors import AgentTxError, StepFailure, TooManySubscribers, error_code

log = logging.getLogger("agenttx.http")

# The next calls of a continuation, by route: each operation names the RPC it serves.
HTTP_CALLS = http_calls(
    {op.operation_id: f"{op.method} {op.path}" for op in (*OPERATIONS, *SAFETY_OPERATIONS)}
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


def refusal_response(exc: AgentTxError, arguments: dict[str, Any]) -> JSONResponse:
    """The response of a call the service refused with ``exc``; ``arguments`` are the call's
    (its path's transaction id among them), which the continuation quotes."""
    if isinstance(exc, StepFailure):
        # Raised inside a step, where the engine turns it into a failed step: one here is a
        # bug, and its text (a tool's error) is for the log.
        log.error("a step failure escaped the step pipeline", exc_info=exc)
        return internal_response()
    response = JSONResponse(refusal_body(exc, arguments), status_code=error_code(exc).http_status)
    if isinstance(exc, TooManySubscribers):  # busy, not wrong: say when to try again
        response.headers["retry-after"] = str(-(-exc.retry_after_ms // 1000))
    return response


def refusal_body(exc: AgentTxError, arguments: dict[str, Any]) -> dict[str, Any]:
    """The error body of ``exc`` (a refused call's, or an event stream's last event)."""
    r = refusal_of(exc, "", arguments, HTTP_CALLS)
    details = _jsonable(exc.details())
    return error_body(error_code(exc).grpc_status, r.code, r.message, r.continuation, details)


def invalid_response(message: str, status: int = 400) -> JSONResponse:
    """A request the adapter cannot use (bad JSON, wrong field type, too large …)."""
    return JSONResponse(
        error_body(
            "INVALID_ARGUMENT",
            "INVALID_ARGUMENT",
            message,
            revise(f"Fix the request and send it again: {message}"),
        ),
        status_code=status,
    )


def internal_response() -> JSONResponse:
    return JSONResponse(
        error_body(
            "INTERNAL",
            "INTERNAL",
            "internal error; see the server log",
            resolve_externally(
                "AgentTx failed to handle the call. Tell the operator; do not retry blindly."
            ),
        ),
        status_code=500,
    )


def plain_error(status: int, code: str, reason: str, message: str) -> JSONResponse:
    """An error the HTTP layer itself answers (no route, wrong method, unauthenticated)."""
    return JSONResponse(
        error_body(code, reason, message, revise(message)),
        status_code=status,
    )


def _jsonable(details: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v if isinstance(v, str | int | float | bool | list) else str(v)
        for k, v in details.items()
    }
