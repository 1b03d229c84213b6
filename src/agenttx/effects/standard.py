"""The channels every engine has: ``webhook.post`` over HTTP through the outbound guard, and
``email.send`` over SMTP when settings are given (else the JSON-lines outbox file takes it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agenttx.effects.channels import Channel
from agenttx.outbound import OutboundGuard

if TYPE_CHECKING:
    from agenttx.effects.smtp import SmtpSettings


def outbound_guard(allow: Sequence[str]) -> OutboundGuard:
    """The guard of ``--webhook-allow`` entries; raises ``ValueError`` naming a bad one."""
    if isinstance(allow, str | bytes):  # one entry iterated as characters would be nonsense
        raise ValueError("webhook_allow must be a list of HOST[:PORT] entries, not one string")
    return OutboundGuard(allow)


def standard_channels(
    guard: OutboundGuard,
    *,
    smtp: SmtpSettings | None = None,
    webhook_secret: str | bytes | None = None,
    clock: Callable[[], float] = time.time,
) -> dict[str, Channel]:
    # Imported here: the HTTP and SMTP clients load only when an engine opens.
    from agenttx.effects.smtp import SmtpChannel
    from agenttx.effects.webhook import WebhookChannel
    from agenttx.tools.builtin.mail import CHANNEL as EMAIL
    from agenttx.tools.builtin.webhook import CHANNEL as WEBHOOK

    secret = webhook_secret.encode() if isinstance(webhook_secret, str) else webhook_secret
    channels: dict[str, Channel] = {WEBHOOK: WebhookChannel(guard, secret=secret, clock=clock)}
    if smtp is not None:
        channels[EMAIL] = SmtpChannel(smtp)
    return channels
