"""``/v1`` as Starlette routes: each operation of the table (``operations.py``) becomes one
route that reads the body within its byte limit, validates it, fills the row's request
message, runs the row in the caller's trace context and answers the reply's JSON; the
server-sent-event streams (``events.py``) sit beside them. The whole sub-app is behind
``AccessMiddleware``, and every error, the HTTP layer's own included (no such route, wrong
method), has the one shape of ``errors.py``.

A client that disconnects mid-step does not cancel the step: it runs to its end (as over
gRPC), and a retry with the same ``request_id`` gets the stored reply.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, get_origin

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agenttx.api.fields import message_fields
from agenttx.api.http.v1 import events
from agenttx.api.http.v1.access import AccessCheck, AccessMiddleware, open_access
from agenttx.api.http.v1.body import BodyTooLarge, NotJson, lenient_body, read_body
from agenttx.api.http.v1.errors import (
    internal_response,
    invalid_response,
    plain_error,
    refusal_response,
)
from agenttx.api.http.v1.operations import OPERATIONS, Operation, path_refusal, request_of
from agenttx.api.operations import CallContext
from agenttx.api.operations.replies import ALL_STRATEGIES
from agenttx.api.tracing import incoming
from agenttx.auth.http_auth import caller_of
from agenttx.core.eager import run_detached
from agenttx.core.offload import INLINE_JSON_CHARS, by_size
from agenttx.numbers import WholeNumber
from agenttx.redaction import redact

log = logging.getLogger("agenttx.http")

# A step's arguments and raw context may each be 1 MiB of UTF-8 (the engine's limits); JSON
# escaping can double them, and the rest of the body is small.
MAX_API_BODY_BYTES = 4 << 20
# A reply with more step records than this is turned into JSON on a worker thread.
_INLINE_STEPS = 200


@dataclass(frozen=True)
class ApiSettings:
    max_body_bytes: int = MAX_API_BODY_BYTES
    access: AccessCheck = open_access  # where authentication plugs in (access.py)
    # More operations beside the built-in ones (a later feature's, or a test's).
    extra_operations: tuple[Operation, ...] = field(default_factory=tuple)
    # The event streams' shared end: the HTTP listener calls ``streams.close`` as it stops.
    streams: events.Streams = field(default_factory=events.Streams)


def api_app(engine: Any, settings: ApiSettings | None = None) -> Starlette:
    """The ``/v1`` sub-app (mount it at ``/v1``) over ``engine``."""
    settings = settings or ApiSettings()
    operations = (*OPERATIONS, *settings.extra_operations)
    # One route per path, holding each of its methods: a method the path does not take is then
    # a 405 whose Allow header lists them all (one route per operation would name only the
    # first route's method, e.g. POST for GET /v1/transactions's path).
    by_path: dict[str, dict[str, Operation]] = {}
    for op in operations:
        by_path.setdefault(op.path, {})[op.method] = op
    routes: list[BaseRoute] = [
        Route(
            path.removeprefix("/v1"),
            endpoint=_by_method(
                {m: _endpoint(engine, op, settings.max_body_bytes) for m, op in ops.items()}
            ),
            methods=list(ops),
            name="|".join(op.operation_id for op in ops.values()),
        )
        for path, ops in by_path.items()
    ]
    routes += events.routes(engine, settings.streams)
    return Starlette(
        routes=routes,
        middleware=[Middleware(AccessMiddleware, check=settings.access)],
        exception_handlers={HTTPException: http_error, Exception: _unexpected},
    )


_Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]


def _by_method(endpoints: dict[str, _Endpoint]) -> _Endpoint:
    """One path's endpoint: the operation of the request's method (the route has already
    refused any other; HEAD is GET without its body)."""

    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await endpoints[method](request)

    return endpoint


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        # RFC 9110: a 405 names the methods the resource takes (the route's Allow header).
        allowed = sorted(m.strip() for m in (exc.headers or {}).get("Allow", "").split(","))
        response = plain_error(
            405,
            "UNIMPLEMENTED",
            "METHOD_NOT_ALLOWED",
            f"{request.method[:16]} is not allowed here; this path takes {', '.join(allowed)}",
        )
        if allowed:
            response.headers["allow"] = ", ".join(allowed)
        return response
    if exc.status_code == 404:
        return plain_error(
            404,
            "NOT_FOUND",
            "NO_SUCH_ROUTE",
            f"no route {request.url.path[:200]!r} (see /openapi.json)",
        )
    return plain_error(exc.status_code, "UNKNOWN", "HTTP_ERROR", redact(str(exc.detail)))


async def _unexpected(request: Request, exc: Exception) -> Response:
    return internal_response(exc, f"{request.method} {request.url.path[:200]}")


def _endpoint(engine: Any, op: Operation, limit: int) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        path = dict(request.path_params)
        refused = path_refusal(path)
        if refused is not None:
            return invalid_response(refused)
        try:
            body, body_bytes = await _body(request, op, limit)
            query = _query(request, op)
        except BodyTooLarge as exc:
            return invalid_response(str(exc), 413)
        except _BadRequest as exc:
            return invalid_response(str(exc), exc.status)
        # HTTP reads names (every strategy) and has no message limit (the whole history).
        context = CallContext(caller_of(request.scope), ALL_STRATEGIES, None)
        try:
            with incoming(request.headers):
                # Detached: a client that goes away does not cancel a step half-way.
                reply: Any = await run_detached(
                    _run(engine, op, path, body, query, body_bytes, context)
                )
        except Exception as exc:  # its public form: a refusal, or an internal 500
            # The call's arguments (its path's transaction id among them) for the continuation.
            arguments = {**path, **(body.model_dump() if isinstance(body, BaseModel) else {})}
            return refusal_response(exc, arguments, op.operation_id, op.row.name)
        return await _json_reply(reply)

    return endpoint


async def _run(
    engine: Any,
    op: Operation,
    path: dict[str, str],
    body: Any,
    query: Any,
    body_bytes: int,
    context: CallContext,
) -> Any:
    request = await request_of(op, path, body, query, body_bytes)
    return await op.row.run(engine, request, context)


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


async def _body(request: Request, op: Operation, limit: int) -> tuple[Any, int]:
    """The parsed body and its size in bytes (0 without one)."""
    model = op.route.body
    if model is None:
        return None, 0
    raw = await read_body(request, limit)
    # No body is the defaults; a body of only spaces is no JSON, refused like any other (the
    # document makes the body optional, not blank text a body).
    if not raw and op.route.body_optional:
        return model(), len(raw)
    ctype = request.headers.get("content-type", "")
    if ctype and not ctype.split(";")[0].strip().lower().endswith("json"):
        raise _BadRequest(f"send the body as application/json, not {ctype[:64]!r}", 415)
    try:
        # A large body (a step's arguments reach 1 MiB, the body more) is parsed on a worker
        # thread, as the engine parses large arguments: 4 MB took ~0.16 s of the loop.
        parsed = await by_size(len(raw), INLINE_JSON_CHARS, model.model_validate_json, raw)
    except ValidationError as exc:
        if not any(e["type"] == "json_invalid" for e in exc.errors()):
            raise _BadRequest(_validation_message(exc, model)) from None
        # JSON pydantic's parser refuses: read again, leniently, so that what the JSON policy
        # judges inside a step fails the step, and a field's number is refused by name.
        parsed = await by_size(len(raw), INLINE_JSON_CHARS, _lenient, model, raw)
    return parsed, len(raw)


def _lenient(model: type[BaseModel], raw: bytes) -> BaseModel:
    fields = model.model_fields
    split = "arguments" in fields and "arguments_json" in fields
    try:
        value, arguments = lenient_body(raw, split_arguments=split)
    except NotJson as exc:
        raise _BadRequest(f"invalid request: {exc}") from None
    try:
        parsed = model.model_validate(value)
    except ValidationError as exc:
        raise _BadRequest(_validation_message(exc, model)) from None
    if arguments is not None:  # as text, as gRPC sends it: the engine's policy judges it
        parsed = parsed.model_copy(update={"arguments": None, "arguments_json": arguments})
    return parsed


def _query(request: Request, op: Operation) -> Any:
    model = op.route.query
    if model is None:
        return None
    values: dict[str, Any] = {}
    fields = model.model_fields
    for key in request.query_params:
        got = request.query_params.getlist(key)
        info = fields.get(key)
        # A repeatable parameter (?status=A&status=B) keeps every value; others the last.
        values[key] = got if info is not None and get_origin(info.annotation) is list else got[-1]
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise _BadRequest(_validation_message(exc, model)) from None


# pydantic's errors for a value that is not a whole number in its field's range.
_NUMBER_ERRORS = frozenset(
    {
        *("int_type", "int_parsing", "int_parsing_size", "int_from_float"),
        *("greater_than_equal", "less_than_equal", "greater_than", "less_than"),
    }
)


def _validation_message(exc: ValidationError, model: type[BaseModel]) -> str:
    parts = []
    for e in exc.errors()[:3]:
        number = _whole_number(model, e["loc"]) if e["type"] in _NUMBER_ERRORS else None
        if number is not None:  # in the words of every surface (agenttx.numbers)
            parts.append(number.refusal(e["input"]).message)
            continue
        where = ".".join(str(p) for p in e["loc"]) or "body"
        parts.append(f"{where}: {e['msg']}")
    more = exc.error_count() - len(parts)
    return "invalid request: " + "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _whole_number(model: type[BaseModel], loc: tuple[int | str, ...]) -> WholeNumber | None:
    """The range of the model's whole-number field at ``loc``, from its own bounds."""
    info = model.model_fields.get(str(loc[0])) if len(loc) == 1 else None
    if info is None or info.annotation not in (int, int | None):
        return None
    low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
    high = next((m.le for m in info.metadata if hasattr(m, "le")), None)
    if not (isinstance(low, int) and isinstance(high, int)):
        return None
    return WholeNumber(str(loc[0]), low, high)


async def _json_reply(reply: Any) -> Response:
    steps = getattr(reply, "steps", None)
    if steps is not None and len(steps) > _INLINE_STEPS:
        # A long history's JSON is built off the loop: parsing every output is the heavy part.
        text = await asyncio.to_thread(_dumps, reply)
    else:
        text = _dumps(reply)
    return Response(text, media_type="application/json")


def _dumps(reply: Any) -> str:
    return json.dumps(message_fields(reply, short_enums=True), ensure_ascii=False)
