"""Reading a request body within its byte limit, before anything parses it.

A ``Content-Length`` over the limit is refused at once (413) without reading a byte; a body
without one (chunked) is read a chunk at a time and refused as soon as it passes the limit,
so a client can never make the server hold more than the limit of one body.
"""

from __future__ import annotations

from starlette.requests import Request


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the request body is over {limit} bytes (the HTTP API's limit); send less — "
            "a step's arguments may be at most 1 MiB"
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or ``BodyTooLarge`` past ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
