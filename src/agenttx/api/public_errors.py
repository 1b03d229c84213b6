"""The one public error policy: what any exception an operation raises becomes before it
leaves the server, whichever surface it leaves by (docs/api.md, "One error policy").

``public_error(exc, log, where)`` turns it into a ``PublicError`` — the reason, the gRPC
status and HTTP status (the one table in ``agenttx.errors``), the public message and fields —
and each surface renders that form in its own shape: gRPC's status, details and trailing
metadata (``grpc.server._refuse``), HTTP's error body (``v1/errors.py``), MCP's error result
(``mcp/server.py``), the CLI's one line (``cli/common.py``). No surface maps an exception
itself, so the same fault has the same reason everywhere.

Two kinds, and nothing in between:

    a refusal   an ``AgentTxError`` with a row in ``ERROR_CODES`` (its family's, at least):
                its reason, its own message and its fields, with every secret in them masked
                (``agenttx.redaction``); the surface adds the continuation
    internal    anything else: a ``StepFailure`` that escaped the step pipeline (its text is a
                tool's raw error), an ``AgentTxError`` no call is refused with, any other
                exception: reason INTERNAL, the fixed message ``INTERNAL_MESSAGE`` and a
                correlation id (the one field); the exception, its text and traceback are
                logged once, on the line that id finds, and never sent

Invariant: nothing a surface sends for an error is taken from the exception but through this
form, so a traceback, a ``StepFailure``'s text or a tool's exception never leaves.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agenttx.api.continuations import Refusal, refusal_of, resolve_externally
from agenttx.api.next_calls import MCP, Calls
from agenttx.errors import (
    ERROR_CODES,
    AgentTxError,
    ErrorCode,
    InternalError,
    StepFailure,
    error_code,
    error_from_wire,
)
from agenttx.redaction import redact

INTERNAL_MESSAGE = "internal error; see the server log"
# The one continuation of an internal error, in every surface's words alike: it names no call.
INTERNAL_INSTRUCTION = (
    "AgentTx failed to handle the call. Tell the user (or the operator), quoting the "
    "correlation id, and do not retry blindly."
)
_INTERNAL = ERROR_CODES[InternalError.reason]


@dataclass(frozen=True, slots=True)
class PublicError:
    """An error as it may leave the server. ``refusal`` is the refused call's error (its
    message masked), from which a surface builds its continuation; None iff internal."""

    reason: str  # stable, the same on every surface: the error's own, or INTERNAL
    grpc_status: str  # the grpc.StatusCode name (ERROR_CODES)
    http_status: int  # the HTTP status (ERROR_CODES)
    message: str  # for humans: the error's own words, masked; or INTERNAL_MESSAGE and the id
    # The error's data fields, masked (a refusal's), or {"correlation_id": …} (internal).
    fields: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    refusal: AgentTxError | None = None
    correlation_id: str = ""  # set iff internal: the server log line's correlation_id

    @property
    def internal(self) -> bool:
        return self.refusal is None


def public_error(exc: BaseException, log: logging.Logger, where: str) -> PublicError:
    """The public form of ``exc``, raised by operation ``where`` (an RPC, a route, an MCP
    tool); an internal error is logged here, once, on ``log`` with its traceback."""
    row = _refusal_row(exc)
    if row is None:
        return internal_error(exc, log, where)
    assert isinstance(exc, AgentTxError)
    message = redact(exc.message)
    if message != exc.message:
        # The continuation quotes the message (``Fix the call: <message>``): mask it there too.
        exc.with_message(message)
    return PublicError(
        exc.reason,
        row.grpc_status,
        row.http_status,
        message,
        MappingProxyType({k: _masked(v) for k, v in exc.details().items()}),
        exc,
    )


def internal_error(exc: BaseException, log: logging.Logger, where: str) -> PublicError:
    """The public form of an internal error: logged once with a new correlation id, which the
    message and the one field carry."""
    correlation = uuid.uuid4().hex
    log.error(
        "internal error in %s (correlation id %s)",
        where,
        correlation,
        exc_info=exc,
        extra={"correlation_id": correlation, "operation": where},
    )
    return PublicError(
        _INTERNAL.reason,
        _INTERNAL.grpc_status,
        _INTERNAL.http_status,
        f"{INTERNAL_MESSAGE} (correlation id {correlation})",
        MappingProxyType({"correlation_id": correlation}),
        None,
        correlation,
    )


def guidance(
    e: PublicError,
    operation: str = "",
    arguments: Mapping[str, Any] | None = None,
    calls: Calls = MCP,
) -> Refusal:
    """What went wrong and what to do next (``continuations``), for ``e`` of ``operation``
    (the row called, by name; "" when not known) with ``arguments``, its next calls named by
    ``calls``: an internal error's names none."""
    if e.refusal is None:
        return Refusal(e.reason, e.message, resolve_externally(INTERNAL_INSTRUCTION))
    return refusal_of(e.refusal, operation, dict(arguments or {}), calls)


def from_wire(status: str, message: str, reason: str, fields: Mapping[str, Any]) -> PublicError:
    """The public form a refused gRPC call carried (the CLI's): the server made it with
    ``public_error``, so it is taken as it came; without a reason, the status's name. An
    internal error is the one whose fields hold a correlation id."""
    correlation = str(fields.get("correlation_id", "")) if reason == _INTERNAL.reason else ""
    refusal = None if correlation else error_from_wire(status, message, reason, fields)
    row = ERROR_CODES.get(reason)
    http_status = row.http_status if row is not None else _INTERNAL.http_status
    return PublicError(reason or status, status, http_status, message, fields, refusal, correlation)


def one_line(e: PublicError) -> str:
    """The CLI's line: ``<STATUS>: <message>``, the reason beside the status when it is not
    the status's own name (``FAILED_PRECONDITION WRONG_STEP: …``)."""
    head = e.grpc_status if e.reason == e.grpc_status else f"{e.grpc_status} {e.reason}"
    return f"{head}: {e.message}"


def public_row(exc: BaseException) -> ErrorCode:
    """The table row a call that raised ``exc`` fails with: INTERNAL's for an internal error."""
    return _refusal_row(exc) or _INTERNAL


def _refusal_row(exc: BaseException) -> ErrorCode | None:
    """The table row a refusal ``exc`` fails its call with; None iff it is internal."""
    if not isinstance(exc, AgentTxError) or isinstance(exc, StepFailure):
        return None
    row = error_code(exc)
    if row is _INTERNAL and not isinstance(exc, InternalError):
        return None  # no call is refused with it (a StartupError, a bare AgentTxError): a bug
    return row


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact(v) if isinstance(v, str) else v for v in value]
    return value
