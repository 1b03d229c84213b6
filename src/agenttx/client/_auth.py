"""What the client sends to prove who it is: an API key as ``authorization: Bearer <key>``
metadata on every call, and TLS channel credentials from PEM bytes.

gRPC refuses call credentials on an insecure channel, so the key travels as plain metadata:
over TLS it is encrypted; without TLS it is sent in clear, which only a loopback server (the
one place a server without TLS should be reached) makes acceptable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

AUTHORIZATION = "authorization"


def auth_metadata(api_key: str | None) -> tuple[tuple[str, str], ...]:
    if api_key is None:
        return ()
    if not api_key or any(c in api_key for c in "\r\n") or api_key != api_key.strip():
        raise ValueError("api_key must be the key as `agenttx keys new` printed it")
    return ((AUTHORIZATION, f"Bearer {api_key}"),)


def tls_credentials(
    credentials: Any,
    root_certificates: bytes | None,
    client_certificate: bytes | None,
    client_key: bytes | None,
) -> Any:
    """``credentials`` as given, else TLS credentials from the PEM bytes (None: plaintext)."""
    if credentials is not None:
        return credentials
    if (client_certificate is None) != (client_key is None):
        raise ValueError("client_certificate and client_key go together (mutual TLS)")
    if root_certificates is None and client_certificate is None:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=root_certificates,
        private_key=client_key,
        certificate_chain=client_certificate,
    )


def call_metadata(
    api_key: str | None, metadata: Sequence[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    """The metadata every call carries before the client's own: the key, then ``metadata``
    (a caller that already sends ``authorization`` keeps its own)."""
    if any(k.lower() == AUTHORIZATION for k, _ in metadata):
        return tuple(metadata)
    return (*auth_metadata(api_key), *metadata)
