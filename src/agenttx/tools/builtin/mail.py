"""``email.send``: stage an email, sent over SMTP only after the transaction commits.

The arguments are checked here, at the step, so a mistake fails the step (with the reason)
instead of dead-lettering the mail after commit: addresses are single ``local@domain``
mailboxes without spaces, angle brackets or line breaks, the subject is one line, and the
sizes stay within the limits below (``docs/operations.md``). The sender is the server's
(``--smtp-from``), not the agent's. The effect goes to the ``email.send`` channel: the SMTP
channel when the server has ``--smtp-url``, else the JSON-lines outbox file.
"""

from __future__ import annotations

import re
from typing import Any, TypedDict

from agenttx.tools.builtin.args import (
    ToolArgumentError,
    as_object,
    json_type,
    optional_str,
    required_str,
)
from agenttx.tools.context import ToolContext
from agenttx.tools.contract import tool

CHANNEL = "email.send"  # a dot: `effect.stage` cannot forge it (its channels are [A-Za-z0-9_])
MAX_RECIPIENTS = 100  # to + cc + bcc
MAX_ADDRESS_BYTES = 254  # RFC 5321's path limit
MAX_SUBJECT_BYTES = 998  # RFC 5322's line limit
MAX_BODY_BYTES = 1 << 20  # body + html, UTF-8

# One mailbox, deliberately plain: what SMTP's RCPT TO takes without quoting.
_ADDRESS = re.compile(r"[^\s@<>()\[\],;:\"]+@[^\s@<>()\[\],;:\"]+\.[^\s@<>()\[\],;:\".]+")


class EmailStaged(TypedDict):
    """What ``email.send`` returns: the mail is staged, not sent (it goes out on commit)."""

    staged: bool
    channel: str
    idempotency_key: str
    recipients: int


_ADDRESSES = {
    "oneOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "maxItems": MAX_RECIPIENTS},
    ]
}


@tool(
    name="email.send",
    bounded=True,
    effect="staged",
    description="Stage an email (to, subject, body; cc, bcc, html optional), sent over SMTP once "
    "after a durable commit; nothing is sent if the transaction rolls back.",
    schema={
        "type": "object",
        "properties": {
            "to": _ADDRESSES,
            "subject": {"type": "string", "maxLength": MAX_SUBJECT_BYTES},
            "body": {"type": "string", "description": "the plain-text part"},
            "cc": _ADDRESSES,
            "bcc": _ADDRESSES,
            "html": {"type": "string", "description": "an HTML alternative to body"},
            "idempotency_key": {
                "type": "string",
                "description": "the same key is the same mail (its Message-ID derives from it)",
            },
        },
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    },
    examples=[
        {
            "to": "ops@example.com",
            "subject": "Refund issued",
            "body": "Order 1042 was refunded.",
            "idempotency_key": "refund-1042",
        }
    ],
)
async def email_send(ctx: ToolContext, arguments: Any) -> EmailStaged:
    args = as_object(arguments)
    to = _addresses(args, "to", required=True)
    cc = _addresses(args, "cc")
    bcc = _addresses(args, "bcc")
    if len(to) + len(cc) + len(bcc) > MAX_RECIPIENTS:
        raise ToolArgumentError(
            f"{len(to) + len(cc) + len(bcc)} recipients, over the limit of {MAX_RECIPIENTS}; "
            "send several mails"
        )
    subject = required_str(args, "subject")
    if "\r" in subject or "\n" in subject:
        raise ToolArgumentError("invalid value for field `subject`: it must be one line")
    if len(subject.encode()) > MAX_SUBJECT_BYTES:
        raise ToolArgumentError(
            f"field `subject` is {len(subject.encode())} bytes, over the limit of "
            f"{MAX_SUBJECT_BYTES}"
        )
    body = required_str(args, "body")
    html = optional_str(args, "html")
    size = len(body.encode()) + len((html or "").encode())
    if size > MAX_BODY_BYTES:
        raise ToolArgumentError(
            f"body and html are {size} bytes, over the limit of {MAX_BODY_BYTES}; "
            "link to large content instead"
        )
    payload: dict[str, Any] = {"to": to, "subject": subject, "body": body}
    for name, value in (("cc", cc), ("bcc", bcc)):
        if value:
            payload[name] = value
    if html is not None:
        payload["html"] = html
    key = ctx.stage_effect(CHANNEL, payload, optional_str(args, "idempotency_key") or None)
    return {
        "staged": True,
        "channel": CHANNEL,
        "idempotency_key": key,
        "recipients": len(to) + len(cc) + len(bcc),
    }


def _addresses(args: dict[str, Any], name: str, *, required: bool = False) -> list[str]:
    value = args.get(name)
    if value is None:
        if required:
            raise ToolArgumentError(f"missing field `{name}`")
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(a, str) for a in items):
        raise ToolArgumentError(
            f"invalid type: {json_type(value)} for field `{name}`, expected an address or a "
            "list of addresses"
        )
    if required and not items:
        raise ToolArgumentError(f"field `{name}` needs at least one address")
    for address in items:
        if len(address.encode()) > MAX_ADDRESS_BYTES:
            raise ToolArgumentError(
                f"an address in `{name}` is {len(address.encode())} bytes, over the limit of "
                f"{MAX_ADDRESS_BYTES}"
            )
        if not _ADDRESS.fullmatch(address):
            raise ToolArgumentError(
                f"invalid address {address[:80]!r} in field `{name}`: expected one mailbox "
                "like name@example.com (no display name, spaces or brackets)"
            )
    return list(items)
