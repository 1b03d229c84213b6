"""TLS for gRPC and HTTP from PEM files: ``--tls-cert``, ``--tls-key`` and, for mutual TLS,
``--tls-client-ca`` (clients must then present a certificate signed by it).

The files are read and checked once at start (an unreadable file or a key that does not match
the certificate stops the start, naming the flag); gRPC gets the bytes, uvicorn the paths.
Protocols below TLS 1.2 are refused on HTTP (gRPC's core allows 1.2 and 1.3 only).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenttx.errors import InvalidArgument

MAX_PEM_BYTES = 1 << 20  # a certificate chain is a few KiB; more is not a PEM file we want


@dataclass(frozen=True)
class TlsFiles:
    cert: Path  # the server's certificate chain (PEM)
    key: Path  # its private key (PEM, unencrypted)
    client_ca: Path | None = None  # set iff clients must present a certificate it signed

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        cert = _read(self.cert, "--tls-cert")
        key = _read(self.key, "--tls-key")
        ca = _read(self.client_ca, "--tls-client-ca") if self.client_ca is not None else None
        self.ssl_context()  # the pair must load together: a mismatch is refused here, by name
        return cert, key, ca

    def ssl_context(self) -> ssl.SSLContext:
        """The server-side context the HTTP listener would use (checks the files)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as exc:
            raise InvalidArgument(
                f"--tls-cert {self.cert} / --tls-key {self.key}: cannot load the pair ({exc}); "
                "both must be PEM, the key unencrypted and matching the certificate"
            ) from exc
        if self.client_ca is not None:
            try:
                ctx.load_verify_locations(self.client_ca)
            except (ssl.SSLError, OSError) as exc:
                raise InvalidArgument(f"--tls-client-ca {self.client_ca}: {exc}") from exc
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def uvicorn_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}
        if self.client_ca is not None:
            options.update(ssl_ca_certs=str(self.client_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
        return options


def grpc_server_credentials(tls: TlsFiles) -> Any:
    import grpc

    cert, key, ca = tls.read()
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def _read(path: Path, flag: str) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise InvalidArgument(f"{flag} {path}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > MAX_PEM_BYTES:
        raise InvalidArgument(f"{flag} {path}: over {MAX_PEM_BYTES} bytes; not a PEM file")
    if b"-----BEGIN " not in data:
        raise InvalidArgument(f"{flag} {path}: not PEM (no -----BEGIN line)")
    return data
