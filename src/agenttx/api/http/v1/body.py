"""Reading a request body within its byte limit, before anything parses it, and reading a
body pydantic's parser refused once more, leniently (``lenient_body``).

A ``Content-Length`` over the limit is refused at once (413) without reading a byte; a body
without one (chunked) is read a chunk at a time and refused as soon as it passes the limit,
so a client can never make the server hold more than the limit of one body.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request

from agenttx.numbers import json_integer


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the request body is over {limit} bytes (the HTTP API's limit); send less — "
            "a step's arguments may be at most 1 MiB"
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or ``BodyTooLarge`` past ``limit`` bytes."""
    declared = (request.headers.get("content-length") or "").strip()
    # The length first: int() of a 5,000-digit header would fail (and "²" is a digit too).
    if declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


class NotJson(Exception):
    """A body the lenient reader cannot take either: not UTF-8, not JSON, or (outside a
    step's ``arguments``) holding what no field can: a lone surrogate, runaway nesting."""


# A JSON string (escapes included) or one structural character; whatever else lies between
# (numbers, literals, spaces) needs no token to find a member's bounds.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')


def lenient_body(raw: bytes, *, split_arguments: bool) -> tuple[Any, str | None]:
    """The body's JSON value, for a body pydantic's parser refused, and with
    ``split_arguments`` the raw text of its top-level ``arguments`` member (None without one).

    pydantic's parser refuses JSON that the JSON policy (``agenttx.jsonpolicy``) judges
    inside a step — a lone surrogate, nesting past its 200 levels, a 5,000-digit integer —
    so ``arguments`` holding them would be a 400 on /v1 but a failed step with a hint on gRPC
    and MCP. Read here, ``arguments`` goes to the engine as text, as gRPC sends it; it must
    still be a JSON object. The rest is read with integers bounded (``json_integer``: a long
    one is no field's number) and must keep to UTF-8. Linear in the body's size, no
    recursion past Python's limit (a RecursionError is an answer, not a crash)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotJson(f"the body is not UTF-8 text (byte {exc.start})") from None
    arguments = None
    if split_arguments:
        span = _member_span(text, "arguments")
        if span is not None:
            start, end = span
            arguments = text[start:end].strip()
            text = f"{text[:start]}null{text[end:]}"
            _check_arguments(arguments)
    try:
        value = json.loads(text, parse_int=json_integer)
    except RecursionError:
        raise NotJson("the body is nested too deeply") from None
    except ValueError as exc:
        raise NotJson(f"the body is not JSON: {exc}") from None
    if split_arguments and arguments is not None and isinstance(value, dict):
        if value.get("arguments") is not None:
            raise NotJson("arguments is sent twice")
        if value.get("arguments_json") is not None:
            raise NotJson("send arguments (an object) or arguments_json (text), not both")
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:
        raise NotJson(
            "the body holds a lone surrogate (such as \\ud800) outside arguments: its text "
            "must be UTF-8"
        ) from None
    return value, arguments


def _check_arguments(arguments: str) -> None:
    """``arguments`` is a JSON object: only what the JSON policy judges may be wrong in it."""
    if not arguments.startswith("{"):
        raise NotJson("arguments must be a JSON object")
    try:
        json.loads(arguments, parse_int=json_integer)
    except RecursionError:
        return  # deep nesting: the policy's json_depth rule fails the step
    except ValueError as exc:
        raise NotJson(f"arguments is not JSON: {exc}") from None


def _member_span(text: str, name: str) -> tuple[int, int] | None:
    """Where the value of the top-level object's member ``name`` lies in ``text``, found
    by counting brackets outside strings (no recursion); None if there is no such member."""
    depth = 0
    expect_key = False
    key = ""
    start = -1
    for token in _TOKENS.finditer(text):
        char = token.group()[0]
        if char == '"':
            if depth == 1 and expect_key:
                key, expect_key = token.group(), False
        elif char in "{[":
            expect_key = depth == 0 and char == "{"
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return (start, token.start()) if start >= 0 else None
        elif depth == 1 and char == ":":
            if _is_name(key, name):
                start = token.end()
        elif depth == 1 and char == ",":
            if start >= 0:
                return start, token.start()
            expect_key, key = True, ""
    return None


def _is_name(key: str, name: str) -> bool:
    if key == f'"{name}"':
        return True
    return "\\" in key and json.loads(key) == name  # an escaped spelling of the name
