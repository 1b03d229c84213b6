"""The webhook channel: POSTs what ``webhook.post`` staged, with httpx2, through the guard.

Every hop — the URL and each redirect — is resolved and checked by the outbound guard
(``agenttx.outbound``), and the request connects to the address that was checked: the URL is
rewritten to that IP, with the original ``Host`` header and, for https, the original name as
TLS server name (so the certificate is still verified against the name). No environment
proxy is used (``trust_env=False``): a proxy would make the connection the guard checked
meaningless.

Each request carries ``Idempotency-Key: <the effect's key>`` (the same on every attempt) and,
when a secret is configured, ``X-AgentTx-Signature: t=<unix seconds>,v1=<hex>``, the
HMAC-SHA256 under the secret of ``<t>.<idempotency key>.<body bytes>`` (docs/effects.md).

Outcomes: 2xx (and 303, "done, see other") delivered; 301/302/307/308 followed, at most
``max_redirects`` times, re-sending the same POST (a webhook turned into a GET would drop its
payload), each target checked again, and to another origin without the agent's own headers
(as browsers drop an Authorization); 408, 425, 429, 5xx, a connection failure, a timeout and
a name that does not resolve are retried by the dispatcher (with this channel's jitter);
every other status, a refused target and too many redirects dead-letter the effect.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx2

from agenttx.effects.channels import Effect, PermanentDeliveryError
from agenttx.errors import OutboundRefused
from agenttx.outbound import OutboundGuard, Target

SECRET_ENV = "AGENTTX_WEBHOOK_SECRET"
SIGNATURE_HEADER = "X-AgentTx-Signature"
RETRIED_STATUSES = frozenset({408, 425, 429})
REDIRECTS = frozenset({301, 302, 307, 308})
MAX_ERROR_TEXT = 300  # characters of a refusing response's body kept in the error


class WebhookStatusError(Exception):
    """The receiver answered with a status worth retrying (408, 425, 429, 5xx)."""


def signature(secret: bytes, timestamp: int, idempotency_key: str, body: bytes) -> str:
    """The ``X-AgentTx-Signature`` value a receiver recomputes to check a delivery."""
    signed = f"{timestamp}.{idempotency_key}.".encode() + body
    return f"t={timestamp},v1={hmac.new(secret, signed, hashlib.sha256).hexdigest()}"


class WebhookChannel:
    """Delivers ``webhook.post`` effects over HTTP(S), checked by ``guard``."""

    jitter = 0.5  # retries wait 50..100 % of the dispatcher's backoff: a herd spreads out

    def __init__(
        self,
        guard: OutboundGuard,
        *,
        secret: bytes | None = None,
        timeout_s: float = 10.0,
        max_redirects: int = 5,
        clock: Callable[[], float] = time.time,
        user_agent: str = "agenttx",
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.guard = guard
        self.secret = secret
        self.timeout_s = timeout_s
        self.max_redirects = max_redirects
        self.clock = clock
        self.user_agent = user_agent
        self.verify = verify  # True: the system's roots; a context for a private CA
        self._client: httpx2.AsyncClient | None = None  # made on first use, reused (its pool)

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = httpx2.AsyncClient(
                trust_env=False,
                follow_redirects=False,
                timeout=self.timeout_s,
                verify=self.verify,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def deliver(self, effect: Effect) -> None:
        # Serialising a body of up to 1 MiB is CPU work: off the event loop.
        url, body, headers = await asyncio.to_thread(_request, effect)
        origin = _origin_of(url)
        content_type = {k: v for k, v in headers.items() if k.lower() == "content-type"}
        headers["Idempotency-Key"] = effect.idempotency_key
        headers["User-Agent"] = self.user_agent
        if self.secret is not None:
            headers[SIGNATURE_HEADER] = signature(
                self.secret, int(self.clock()), effect.idempotency_key, body
            )
        for _hop in range(self.max_redirects + 1):
            try:
                target = await self.guard.resolve(url)
            except OutboundRefused as exc:
                raise PermanentDeliveryError(exc.message) from None
            status, location, text = await self._post(target, body, headers)
            if 200 <= status < 300 or status == 303:
                return
            if status in REDIRECTS and location:
                url = urljoin(url, location)
                try:
                    moved = _origin_of(url) != origin
                except ValueError:  # a port out of range: no request could reach it
                    raise PermanentDeliveryError(
                        f"redirected to {_origin(url)}, which is not a valid URL"
                    ) from None
                if moved:
                    # As browsers do: the agent's own headers (an Authorization, an API key)
                    # were meant for the first origin, not for wherever it redirects.
                    own = {k for k in headers if k not in _DELIVERY_HEADERS}
                    for name in own:
                        del headers[name]
                    headers.update(content_type)
                continue
            if status in RETRIED_STATUSES or status >= 500:
                raise WebhookStatusError(f"HTTP {status} from {_origin(url)}{_said(text)}")
            raise PermanentDeliveryError(f"HTTP {status} from {_origin(url)}{_said(text)}")
        raise PermanentDeliveryError(
            f"more than {self.max_redirects} redirects, the last to {_origin(url)}"
        )

    async def _post(
        self, target: Target, body: bytes, headers: dict[str, str]
    ) -> tuple[int, str, str]:
        """One request to the checked address: (status, Location, start of the body)."""
        parts = urlsplit(target.url)
        ip = f"[{target.address}]" if ":" in target.address else target.address
        direct = urlunsplit(
            (parts.scheme, f"{ip}:{target.port}", parts.path or "/", parts.query, "")
        )
        default_port = {"http": 80, "https": 443}[target.scheme]
        # An international name goes on the wire in its IDNA form (headers and SNI are ASCII).
        wire_name = target.host if target.host.isascii() else target.host.encode("idna").decode()
        name = f"[{wire_name}]" if ":" in wire_name else wire_name
        host = name if target.port == default_port else f"{name}:{target.port}"
        extensions: dict[str, Any] = {}
        if target.scheme == "https":
            extensions["sni_hostname"] = wire_name
        request = self._http().build_request(
            "POST",
            direct,
            content=body,
            headers={**headers, "Host": host},
            extensions=extensions,
        )
        response = await self._http().send(request, stream=True)
        try:
            text = ""
            if not 200 <= response.status_code < 400:
                async for chunk in response.aiter_bytes():
                    text += chunk.decode("utf-8", "replace")
                    if len(text) >= MAX_ERROR_TEXT:
                        break
            return response.status_code, response.headers.get("location", ""), text
        finally:
            await response.aclose()


def _request(effect: Effect) -> tuple[str, bytes, dict[str, str]]:
    payload = effect.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("url"), str):
        raise PermanentDeliveryError("not a webhook.post payload: no url")
    headers = dict(payload.get("headers") or {})
    if "body" in payload:
        body = str(payload["body"]).encode()
        default_type = "text/plain; charset=utf-8"
    else:
        body = json.dumps(payload.get("json"), ensure_ascii=False, separators=(",", ":")).encode()
        default_type = "application/json"
    if not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = default_type
    return payload["url"], body, headers


_DELIVERY_HEADERS = frozenset({"Idempotency-Key", "User-Agent", SIGNATURE_HEADER})


def _origin_of(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def _origin(url: str) -> str:
    """The URL without its query (which may hold a token) for error lines."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _said(text: str) -> str:
    text = " ".join(text.split())[:MAX_ERROR_TEXT]
    return f": {text}" if text else ""
