"""``webhook.post``: stage an HTTP POST, sent only after the transaction commits.

The target is checked at the step by the outbound guard (``agenttx.outbound``): a URL the
guard refuses (loopback, private, link-local, multicast, metadata — unless allow-listed)
fails the step with the reason and the flag that would allow it, and nothing is staged. The
delivery checks it again after DNS resolution. The body is ``json`` (any JSON value, sent as
``application/json``) or ``body`` (text, ``text/plain`` unless a Content-Type header says
otherwise); headers the delivery sets itself are refused here.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, TypedDict

from agenttx.outbound import OutboundGuard
from agenttx.tools.builtin.args import (
    ToolArgumentError,
    as_object,
    json_type,
    optional_str,
    required_str,
)
from agenttx.tools.context import ToolContext
from agenttx.tools.contract import Tool, tool

CHANNEL = "webhook.post"  # a dot: `effect.stage` cannot forge it (its channels are [A-Za-z0-9_])
MAX_BODY_BYTES = 1 << 20  # the request body, UTF-8
MAX_HEADERS = 64
MAX_HEADER_BYTES = 8192  # one header's name + value
# Set by the delivery (or by HTTP itself): an agent's value would be wrong or unsafe.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-authorization",
        "idempotency-key",
        "x-agenttx-signature",
    }
)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")


class WebhookStaged(TypedDict):
    """What ``webhook.post`` returns: the request is staged, not sent (it goes on commit)."""

    staged: bool
    channel: str
    idempotency_key: str
    url: str


def webhook_post(guard: OutboundGuard) -> Tool:
    """The ``webhook.post`` tool, checking targets with ``guard`` (the server's allow-list)."""

    @tool(
        name="webhook.post",
        bounded=True,
        effect="staged",
        description="Stage an HTTP POST of json (or a text body) to a public URL, sent once "
        "after a durable commit with an Idempotency-Key header; nothing is sent on rollback.",
        schema={
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "http:// or https://, a public host"},
                "json": {"description": "any JSON value, sent as application/json"},
                "body": {"type": "string", "description": "a text body, instead of json"},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "idempotency_key": {
                    "type": "string",
                    "description": "sent as the Idempotency-Key header; a new one per step "
                    "when omitted",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        examples=[
            {
                "url": "https://hooks.example.com/orders",
                "json": {"order": 1042, "event": "refunded"},
                "idempotency_key": "refund-1042",
            }
        ],
    )
    async def post(ctx: ToolContext, arguments: Any) -> WebhookStaged:
        args = as_object(arguments)
        url = required_str(args, "url")
        guard.check_url(url)  # raises OutboundRefused: a step failure naming the fix
        payload: dict[str, Any] = {"url": url}
        if "json" in args and "body" in args:
            raise ToolArgumentError("give `json` or `body`, not both")
        if "body" in args:
            body = required_str(args, "body")
            size = len(body.encode())
            payload["body"] = body
        else:
            value = args.get("json")
            # Up to a step's argument limit (1 MiB by default): serialised off the event loop.
            size = await asyncio.to_thread(_json_bytes, value)
            payload["json"] = value
        if size > MAX_BODY_BYTES:
            raise ToolArgumentError(
                f"the request body is {size} bytes, over the limit of {MAX_BODY_BYTES}"
            )
        headers = _headers(args.get("headers"))
        if headers:
            payload["headers"] = headers
        key = ctx.stage_effect(CHANNEL, payload, optional_str(args, "idempotency_key") or None)
        return {"staged": True, "channel": CHANNEL, "idempotency_key": key, "url": url}

    return post


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _headers(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ToolArgumentError(
            f"invalid type: {json_type(value)} for field `headers`, expected an object"
        )
    if len(value) > MAX_HEADERS:
        raise ToolArgumentError(f"{len(value)} headers, over the limit of {MAX_HEADERS}")
    headers: dict[str, str] = {}
    for name, text in value.items():
        if not _TOKEN.fullmatch(name):
            raise ToolArgumentError(f"invalid header name {name[:80]!r}")
        if name.lower() in RESERVED_HEADERS:
            raise ToolArgumentError(f"header {name!r} is set by the delivery itself; leave it out")
        if not isinstance(text, str):
            raise ToolArgumentError(
                f"invalid type: {json_type(text)} for header {name!r}, expected a string"
            )
        if any(c in text for c in "\r\n\0"):
            raise ToolArgumentError(f"header {name!r} holds a line break")
        if len(name.encode()) + len(text.encode()) > MAX_HEADER_BYTES:
            raise ToolArgumentError(
                f"header {name!r} is over the limit of {MAX_HEADER_BYTES} bytes"
            )
        headers[name] = text
    return headers
