"""Webhooks over HTTPS connect to the address the guard checked and still verify the
certificate against the URL's name (sent as the TLS server name): a real HTTPS receiver with
a certificate made in the test for one name, reached by that name through a resolver that
answers loopback, and refused for another name on the same address."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agenttx.effects import Effect
from agenttx.effects.webhook import WebhookChannel
from agenttx.outbound import OutboundGuard
from http_receiver import Receiver, http_receiver

NAME = "hooks.example.com"


def _certificate(tmp_path: Path) -> tuple[Path, Path, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAME)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(pem)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path, pem


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[tuple[Receiver, ssl.SSLContext]]:
    cert, key, pem = _certificate(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cadata=pem.decode())
    with http_receiver(server) as hooks:
        yield hooks, client


def _effect(url: str) -> Effect:
    return Effect(1, "tx-1", 1, "webhook.post", {"url": url, "json": {"a": 1}}, "k", 1, 0.0)


async def test_https_goes_to_the_checked_address_and_verifies_the_name(
    tls: tuple[Receiver, ssl.SSLContext],
) -> None:
    hooks, trust = tls

    async def dns(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # both names point at the receiver

    guard = OutboundGuard([f"{NAME}:{hooks.port}", f"other.example.com:{hooks.port}"], resolver=dns)
    channel = WebhookChannel(guard, verify=trust)
    try:
        await channel.deliver(_effect(f"https://{NAME}:{hooks.port}/in"))
        (seen,) = hooks.requests()
        assert seen.headers["host"] == f"{NAME}:{hooks.port}"
        assert seen.headers["idempotency-key"] == "k"
        # Same address, another name: the certificate does not match, nothing is sent.
        with pytest.raises(httpx2.ConnectError, match="certificate"):
            await channel.deliver(_effect(f"https://other.example.com:{hooks.port}/in"))
        assert len(hooks.requests()) == 1
    finally:
        await channel.aclose()
