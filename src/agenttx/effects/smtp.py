"""The SMTP channel: sends the mails ``email.send`` staged, with aiosmtplib.

Each effect is one message whose ``Message-ID`` is derived from the effect's tenant and
idempotency key, so every delivery attempt of one effect — and a repeat after a crash between
the server's acceptance and the outbox row being marked delivered — carries the same id, and
a receiver (or a mail store) that drops an id it already has receives the mail once. Replies
classify the failure: a 5xx reply to the sender, recipients or data is permanent (the effect
is dead-lettered with the server's words); 4xx replies, a refused connection, a timeout and
an authentication failure (an operator's settings, fixed without touching the effect) are
retried by the dispatcher, with its backoff and this channel's jitter.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any
from urllib.parse import urlsplit

import aiosmtplib

from agenttx.effects.channels import Effect, PermanentDeliveryError

log = logging.getLogger("agenttx.effects.smtp")

USERNAME_ENV = "AGENTTX_SMTP_USERNAME"
PASSWORD_ENV = "AGENTTX_SMTP_PASSWORD"
STARTTLS_MODES = ("auto", "require", "off")


@dataclass(frozen=True)
class SmtpSettings:
    """Where and how to send: ``smtp://host[:port]`` (STARTTLS as ``starttls`` says) or
    ``smtps://host[:port]`` (TLS from the first byte). Credentials come from the environment
    (``AGENTTX_SMTP_USERNAME``, ``AGENTTX_SMTP_PASSWORD``), never from a flag."""

    host: str
    port: int
    sender: str  # the From address of every mail (--smtp-from)
    implicit_tls: bool = False  # smtps://
    starttls: str = "auto"  # auto: if the server offers it; require: fail without; off
    username: str | None = None
    password: str | None = None  # never in repr (below)
    timeout_s: float = 30.0

    @classmethod
    def from_url(
        cls,
        url: str,
        sender: str,
        *,
        starttls: str = "auto",
        env: Mapping[str, str] = os.environ,
        timeout_s: float = 30.0,
    ) -> SmtpSettings:
        """Settings from ``--smtp-url`` and ``--smtp-from``; raises ``ValueError`` saying
        what is wrong."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("smtp", "smtps"):
            raise ValueError(f"--smtp-url {url!r}: use smtp://host:port or smtps://host:port")
        if parts.username or parts.password:
            raise ValueError(
                f"--smtp-url must not hold credentials; set {USERNAME_ENV} and {PASSWORD_ENV}"
            )
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"--smtp-url {url!r}: {exc}") from None
        if not parts.hostname:
            raise ValueError(f"--smtp-url {url!r} has no host")
        if starttls not in STARTTLS_MODES:
            raise ValueError(f"--smtp-starttls must be one of {', '.join(STARTTLS_MODES)}")
        if scheme == "smtps" and starttls == "require":
            raise ValueError("--smtp-starttls require is for smtp://; smtps:// is TLS already")
        if "@" not in sender or any(c in sender for c in " \r\n<>"):
            raise ValueError(f"--smtp-from {sender!r} must be one address like agent@example.com")
        implicit = scheme == "smtps"
        username = env.get(USERNAME_ENV) or None
        password = env.get(PASSWORD_ENV) or None
        if (username is None) != (password is None):
            raise ValueError(f"set both {USERNAME_ENV} and {PASSWORD_ENV}, or neither")
        return cls(
            host=parts.hostname,
            port=port if port is not None else (465 if implicit else 25),
            sender=sender,
            implicit_tls=implicit,
            starttls=starttls,
            username=username,
            password=password,
            timeout_s=timeout_s,
        )

    def __repr__(self) -> str:  # the password never reaches a log line
        scheme = "smtps" if self.implicit_tls else "smtp"
        return f"SmtpSettings({scheme}://{self.host}:{self.port}, from={self.sender!r})"


def message_id(tenant: str, idempotency_key: str, sender: str) -> str:
    """The Message-ID of an effect: the same for every attempt of one idempotency key."""
    digest = hashlib.sha256(f"{tenant}\0{idempotency_key}".encode()).hexdigest()[:40]
    domain = sender.rpartition("@")[2] or "agenttx.invalid"
    return f"<{digest}.agenttx@{domain}>"


def build_message(effect: Effect, sender: str) -> tuple[EmailMessage, list[str]]:
    """The message and its envelope recipients (``bcc`` is in the envelope only)."""
    payload = effect.payload if isinstance(effect.payload, dict) else {}
    try:
        to, cc, bcc = (_list(payload.get(k)) for k in ("to", "cc", "bcc"))
        subject, body = str(payload["subject"]), str(payload["body"])
    except (KeyError, TypeError) as exc:
        raise PermanentDeliveryError(f"not an email.send payload ({exc})") from None
    html = payload.get("html")
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    if cc:
        msg["Cc"] = ", ".join(cc)
    msg["Subject"] = subject
    msg["Date"] = formatdate(effect.committed_at, usegmt=True)
    msg["Message-ID"] = message_id(effect.tenant, effect.idempotency_key, sender)
    msg["X-AgentTx-Transaction"] = effect.tx_id
    msg["X-AgentTx-Idempotency-Key"] = effect.idempotency_key
    msg.set_content(body)
    if isinstance(html, str):
        msg.add_alternative(html, subtype="html")
    recipients = [*to, *cc, *bcc]
    if not recipients:
        raise PermanentDeliveryError("the email has no recipients")
    return msg, recipients


class SmtpChannel:
    """Delivers ``email.send`` effects to one SMTP server (``SmtpSettings``)."""

    jitter = 0.5  # retries wait 50..100 % of the dispatcher's backoff: a herd spreads out

    def __init__(self, settings: SmtpSettings) -> None:
        self.settings = settings

    async def deliver(self, effect: Effect) -> None:
        s = self.settings
        # Building and serialising a large mail is CPU work: off the event loop.
        msg, recipients = await asyncio.to_thread(build_message, effect, s.sender)
        start_tls: bool | None = {"auto": None, "require": True, "off": False}[s.starttls]
        kwargs: dict[str, Any] = {}
        if s.username is not None:
            kwargs.update(username=s.username, password=s.password)
        try:
            refused, _ = await aiosmtplib.send(
                msg,
                sender=s.sender,
                recipients=recipients,
                hostname=s.host,
                port=s.port,
                use_tls=s.implicit_tls,
                start_tls=None if s.implicit_tls else start_tls,
                timeout=s.timeout_s,
                **kwargs,
            )
        except aiosmtplib.SMTPRecipientsRefused as exc:
            codes = [r.code for r in exc.recipients]
            words = "; ".join(f"{r.recipient}: {r.code} {r.message}" for r in exc.recipients)
            if all(500 <= c < 600 for c in codes):
                raise PermanentDeliveryError(f"SMTP refused every recipient: {words}") from None
            raise ConnectionError(f"SMTP deferred recipients: {words}") from None
        except aiosmtplib.SMTPAuthenticationError as exc:
            raise ConnectionError(f"SMTP authentication failed: {exc.code} {exc.message}") from None
        except aiosmtplib.SMTPResponseException as exc:
            if 500 <= exc.code < 600:
                raise PermanentDeliveryError(f"SMTP {exc.code} {exc.message}") from None
            raise
        if refused:  # accepted for some recipients: sent; the rest cannot be resent alone
            log.warning(
                "effect %s: SMTP refused %s",
                effect.id,
                ", ".join(f"{k}: {v.code} {v.message}" for k, v in refused.items()),
            )


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"expected addresses, got {type(value).__name__}")
