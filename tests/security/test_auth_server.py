"""``agenttx serve --api-keys`` with TLS, as a client meets it: keys from a real key file, a
self-signed certificate made here, our client with ``api_key`` and ``root_certificates``, MCP
over HTTPS with a bearer key; and the refusal to bind beyond loopback without keys."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import agenttx
from agenttx.auth.keys import KeyRing, hash_secret, new_secret
from agenttx.cli import main
from agenttx.client import AsyncAgentTxClient, RetryPolicy
from agenttx.server import RunningServer, ServeConfig, StartupError, start
from mcp_harness import structured

pytestmark = pytest.mark.stores("sqlite")


def self_signed(directory: Path, name: str = "server") -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@dataclass
class Keys:
    alice: str  # tenant acme, agent
    bob: str  # tenant globex, agent
    ops: str  # tenant acme, admin
    file: Path


def write_keys(path: Path) -> Keys:
    alice, bob, ops = new_secret(), new_secret(), new_secret()
    path.write_text(
        f"""
[[key]]
hash = "{hash_secret(alice)}"
principal = "alice"
tenant = "acme"
roles = ["agent"]

[[key]]
hash = "{hash_secret(bob)}"
principal = "bob"
tenant = "globex"
roles = ["agent"]
note = "second tenant"

[[key]]
hash = "{hash_secret(ops)}"
principal = "ops"
tenant = "acme"
roles = ["admin"]
"""
    )
    return Keys(alice, bob, ops, path)


@dataclass
class Secured:
    running: RunningServer
    keys: Keys
    ca: bytes  # the server's self-signed certificate: the clients' root

    def client(self, key: str | None) -> AsyncAgentTxClient:
        return AsyncAgentTxClient(
            self.running.address,
            api_key=key,
            root_certificates=self.ca,
            retry=RetryPolicy(max_attempts=1),
            timeout=10,
        )


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Secured]:
    cert, key = self_signed(tmp_path)
    keys = write_keys(tmp_path / "keys.toml")
    running = await start(
        ServeConfig(
            listen_addr="127.0.0.1:0",
            http_addr="127.0.0.1:0",
            data_dir=tmp_path / "data",
            metrics_addr=None,
            api_keys=keys.file,
            tls_cert=cert,
            tls_key=key,
        )
    )
    try:
        yield Secured(running, keys, cert.read_bytes())
    finally:
        await running.stop(0)


async def test_each_key_sees_its_own_tenant_over_tls(secured: Secured) -> None:
    alice, bob = secured.client(secured.keys.alice), secured.client(secured.keys.bob)
    try:
        tx = (await alice.begin(agent_id="a")).transaction_id
        put = await alice.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1})
        assert put.status is agenttx.StepStatus.SUCCESS
        with pytest.raises(agenttx.NotFound):
            await bob.get_transaction(tx)
        with pytest.raises(agenttx.NotFound):
            await bob.execute_step(tx, 2, "kv.get", {"key": "k"})
        assert (await alice.commit(tx)).committed
        page = await bob.list_transactions()
        assert page.transactions == []
        own = (await bob.begin()).transaction_id
        # kv is per tenant: bob's tenant has no "k"
        miss = await bob.execute_step(own, 1, "kv.get", {"key": "k"})
        assert miss.status is agenttx.StepStatus.ROLLBACK_TRIGGERED
        # Files too: alice's file is not in bob's sandbox, and bob's write does not touch it.
        more = (await alice.begin()).transaction_id
        wrote = await alice.execute_step(more, 1, "fs.write", {"path": "a.txt", "contents": "A"})
        assert wrote.status is agenttx.StepStatus.SUCCESS
        assert (await alice.commit(more)).committed
        unseen = await bob.execute_step(own, 1, "fs.read", {"path": "a.txt"})
        assert unseen.status is agenttx.StepStatus.ROLLBACK_TRIGGERED
        put = await bob.execute_step(own, 1, "fs.write", {"path": "a.txt", "contents": "B"})
        assert put.status is agenttx.StepStatus.SUCCESS
        check = (await alice.begin()).transaction_id
        read = await alice.execute_step(check, 1, "fs.read", {"path": "a.txt"})
        assert read.output == {"path": "a.txt", "contents": "A"}
        listed = {t.transaction_id for t in (await alice.list_transactions()).transactions}
        assert tx in listed
        assert own not in listed
    finally:
        await alice.close()
        await bob.close()


async def test_the_owner_is_on_the_wire_and_an_admin_filters_by_it(secured: Secured) -> None:
    alice, ops = secured.client(secured.keys.alice), secured.client(secured.keys.ops)
    try:
        tx = (await alice.begin()).transaction_id
        own = (await ops.begin()).transaction_id
        info = await ops.get_transaction(tx)  # an admin of acme reads alice's
        assert (info.principal, info.tenant) == ("alice", "acme")
        page = await ops.list_transactions(principal="alice")
        assert [(t.transaction_id, t.principal) for t in page.transactions] == [(tx, "alice")]
        assert {t.transaction_id for t in (await ops.list_transactions()).transactions} == {
            tx,
            own,
        }
        with pytest.raises(agenttx.PermissionDenied):
            await alice.get_transaction(own)  # an agent does not read the admin's
        assert (await ops.commit(tx)).committed  # an admin acts on alice's
    finally:
        await alice.close()
        await ops.close()


async def test_no_key_or_a_wrong_key_is_unauthenticated(secured: Secured) -> None:
    for key in (None, new_secret()):
        client = secured.client(key)
        try:
            with pytest.raises(agenttx.Unauthenticated) as refused:
                await client.begin()
            assert refused.value.code == "UNAUTHENTICATED"
            if key is not None:
                assert key not in refused.value.message
            with pytest.raises(agenttx.Unauthenticated):
                await client.list_tools()
        finally:
            await client.close()


async def test_a_plaintext_client_cannot_talk_to_the_tls_port(secured: Secured) -> None:
    client = AsyncAgentTxClient(
        secured.running.address,
        api_key=secured.keys.alice,
        retry=RetryPolicy(max_attempts=1),
        timeout=3,
    )
    try:
        with pytest.raises(agenttx.AgentTxError):
            await client.begin()
    finally:
        await client.close()


async def test_sighup_reload_takes_new_keys_and_drops_revoked(secured: Secured) -> None:
    carol = new_secret()
    text = secured.keys.file.read_text()
    # Revoke bob (his table goes), add carol.
    alice_only = text.split("[[key]]")[1]
    secured.keys.file.write_text(
        f'[[key]]{alice_only}\n[[key]]\nhash = "{hash_secret(carol)}"\n'
        'principal = "carol"\ntenant = "acme"\nroles = ["admin"]\n'
    )
    ring = secured.running.keys
    assert ring is not None
    assert ring.reload()
    for key, works in ((carol, True), (secured.keys.bob, False), (secured.keys.alice, True)):
        client = secured.client(key)
        try:
            if works:
                await client.list_tools()
            else:
                with pytest.raises(agenttx.Unauthenticated):
                    await client.list_tools()
        finally:
            await client.close()
    # A broken file is refused whole: the keys in force stay.
    secured.keys.file.write_text("[[key]]\nhash = 'nope'\n")
    assert not ring.reload()
    assert ring.resolve(carol).principal == "carol"


async def _post(url: str, ca: bytes, key: str | None) -> httpx2.Response:
    headers = {"content-type": "application/json", "accept": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    ctx = ssl.create_default_context(cadata=ca.decode())
    async with httpx2.AsyncClient(verify=ctx, timeout=10) as http:
        return await http.post(url, content=b"{}", headers=headers)


async def test_mcp_over_https_needs_a_bearer_key_and_acts_for_it(secured: Secured) -> None:
    http = secured.running.http
    assert http is not None
    url = f"https://{http.address}/mcp"
    refused = await _post(url, secured.ca, None)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert refused.json()["error"]["code"] == "UNAUTHENTICATED"
    wrong = new_secret()
    refused = await _post(url, secured.ca, wrong)
    assert refused.status_code == 401
    assert wrong not in refused.text

    ctx = ssl.create_default_context(cadata=secured.ca.decode())

    def session(key: str) -> Any:
        http_client = httpx2.AsyncClient(
            headers={"authorization": f"Bearer {key}"}, verify=ctx, timeout=30
        )
        return Client(streamable_http_client(url, http_client=http_client), read_timeout_seconds=30)

    async with session(secured.keys.alice) as c:
        tx = structured(await c.call_tool("begin_transaction", {"agent_id": "mcp"}))[
            "transaction_id"
        ]
    # Begun over MCP with alice's key: alice's, in acme; bob's tenant does not see it.
    alice, bob = secured.client(secured.keys.alice), secured.client(secured.keys.bob)
    try:
        assert (await alice.get_transaction(tx)).transaction_id == tx
        with pytest.raises(agenttx.NotFound):
            await bob.get_transaction(tx)
    finally:
        await alice.close()
        await bob.close()
    async with session(secured.keys.bob) as c:
        got = await c.call_tool("get_transaction", {"transaction_id": tx})
        assert got.is_error


@pytest.mark.parametrize("flag", ["listen_addr", "http_addr"])
async def test_without_keys_a_non_loopback_bind_is_refused(tmp_path: Path, flag: str) -> None:
    settings: dict[str, Any] = {"listen_addr": "127.0.0.1:0", flag: "0.0.0.0:0"}
    with pytest.raises(StartupError) as refused:
        await start(ServeConfig(data_dir=tmp_path / "d", metrics_addr=None, **settings))
    message = str(refused.value)
    assert "--" + flag.replace("_", "-") in message
    assert "agenttx keys new" in message
    assert "--api-keys" in message
    assert not (tmp_path / "d").exists()  # refused before anything was opened


async def test_with_keys_any_address_may_be_bound(tmp_path: Path) -> None:
    keys = write_keys(tmp_path / "keys.toml")
    running = await start(
        ServeConfig(
            listen_addr="0.0.0.0:0", data_dir=tmp_path / "d", metrics_addr=None, api_keys=keys.file
        )
    )
    try:
        port = running.address.rsplit(":", 1)[1]
        client = AsyncAgentTxClient(f"127.0.0.1:{port}", api_key=keys.alice, timeout=10)
        try:
            await client.list_tools()
        finally:
            await client.close()
    finally:
        await running.stop(0)


async def test_a_bad_key_file_stops_the_start_naming_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "keys.toml"
    bad.write_text(
        '[[key]]\nhash = "sha256:00"\nprincipal = "p"\ntenant = "t"\nroles = ["agent"]\n'
    )
    with pytest.raises(StartupError, match=r"keys.toml: key 1: hash must be"):
        await start(ServeConfig(data_dir=tmp_path / "d", metrics_addr=None, api_keys=bad))
    bad.write_text(
        '[[key]]\nhash = "sha256:' + "0" * 64 + '"\nprincipal = "p"\ntenant = "t"\n'
        'roles = ["root"]\n'
    )
    with pytest.raises(StartupError, match="unknown role 'root'"):
        await start(ServeConfig(data_dir=tmp_path / "d", metrics_addr=None, api_keys=bad))


async def test_tls_files_that_do_not_match_stop_the_start(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path, "one")
    _, other_key = self_signed(tmp_path, "two")
    with pytest.raises(StartupError, match=r"--tls-cert .* cannot load the pair"):
        await start(
            ServeConfig(
                listen_addr="127.0.0.1:0",
                data_dir=tmp_path / "d",
                metrics_addr=None,
                tls_cert=cert,
                tls_key=other_key,
            )
        )


def test_keys_new_prints_a_secret_that_the_printed_entry_accepts(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        main, ["keys", "new", "--principal", "ci bot", "--tenant", "acme", "--role", "admin"]
    )
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    secret = lines[1].strip()
    assert secret.startswith("atx_")
    entry = "\n".join(lines[lines.index("[[key]]") :])
    path = tmp_path / "keys.toml"
    path.write_text(entry)
    caller = KeyRing.from_file(path).resolve(secret)
    assert (caller.principal, caller.tenant, set(caller.roles)) == (
        "ci bot",
        "acme",
        {agenttx.Role.ADMIN},
    )
    assert secret not in path.read_text()  # only its hash is kept


def client_pair(directory: Path, ca_cert_path: Path, ca_key_path: Path) -> tuple[bytes, bytes]:
    """A client certificate signed by the CA at ``ca_*_path``, and its key (PEM bytes)."""
    ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]  # an EC key, as made above
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


async def test_mutual_tls_needs_a_client_certificate_of_the_ca(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    ca_cert, ca_key = self_signed(tmp_path, "clients-ca")
    keys = write_keys(tmp_path / "keys.toml")
    running = await start(
        ServeConfig(
            listen_addr="127.0.0.1:0",
            data_dir=tmp_path / "data",
            metrics_addr=None,
            api_keys=keys.file,
            tls_cert=cert,
            tls_key=key,
            tls_client_ca=ca_cert,
        )
    )
    client_cert, client_key = client_pair(tmp_path, ca_cert, ca_key)
    stranger_cert, stranger_key = client_pair(tmp_path, *self_signed(tmp_path, "other-ca"))

    def client(pair: tuple[bytes, bytes] | None) -> AsyncAgentTxClient:
        return AsyncAgentTxClient(
            running.address,
            api_key=keys.alice,
            root_certificates=cert.read_bytes(),
            client_certificate=pair[0] if pair else None,
            client_key=pair[1] if pair else None,
            retry=RetryPolicy(max_attempts=1),
            timeout=5,
        )

    try:
        for refused in (None, (stranger_cert, stranger_key)):
            c = client(refused)
            try:
                with pytest.raises(agenttx.AgentTxError) as failed:
                    await c.list_tools()
                assert not isinstance(failed.value, agenttx.Unauthenticated)  # refused in TLS
            finally:
                await c.close()
        c = client((client_cert, client_key))
        try:
            assert await c.list_tools()
        finally:
            await c.close()
    finally:
        await running.stop(0)


def test_a_key_is_found_among_many_sharing_its_digest_prefix() -> None:
    import hashlib
    import os

    from agenttx.auth.keys import KeyEntry
    from agenttx.types import Caller

    secret = new_secret()
    digest = hashlib.sha256(secret.encode()).digest()
    mine = Caller("me", "acme", frozenset({agenttx.Role.AGENT}))
    other = Caller("other", "acme", frozenset({agenttx.Role.ADMIN}))
    # Neighbours in the same bucket (same first two bytes), and many elsewhere.
    entries = [KeyEntry(digest[:2] + os.urandom(30), other) for _ in range(5)]
    entries += [KeyEntry(os.urandom(32), other) for _ in range(2000)]
    ring = KeyRing([*entries, KeyEntry(digest, mine)])
    assert len(ring) == 2006
    assert ring.resolve(secret) is mine
    with pytest.raises(agenttx.Unauthenticated):
        ring.resolve(secret + "x")
    with pytest.raises(agenttx.Unauthenticated, match="no API key"):
        ring.resolve(None)
    with pytest.raises(agenttx.Unauthenticated, match="over 512 bytes"):
        ring.resolve("x" * 513)


async def test_https_with_mutual_tls_needs_a_client_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    ca_cert, ca_key = self_signed(tmp_path, "clients-ca")
    keys = write_keys(tmp_path / "keys.toml")
    running = await start(
        ServeConfig(
            listen_addr="127.0.0.1:0",
            http_addr="127.0.0.1:0",
            data_dir=tmp_path / "data",
            metrics_addr=None,
            api_keys=keys.file,
            tls_cert=cert,
            tls_key=key,
            tls_client_ca=ca_cert,
        )
    )
    try:
        assert running.http is not None
        url = f"https://{running.http.address}/mcp"
        pem_cert, pem_key = client_pair(tmp_path, ca_cert, ca_key)
        (tmp_path / "client.pem").write_bytes(pem_cert)
        (tmp_path / "client.key").write_bytes(pem_key)

        async def status(with_certificate: bool) -> int:
            ctx = ssl.create_default_context(cadata=cert.read_text())
            if with_certificate:
                ctx.load_cert_chain(tmp_path / "client.pem", tmp_path / "client.key")
            async with httpx2.AsyncClient(verify=ctx, timeout=10) as http:
                reply = await http.post(url, content=b"{}")
                return reply.status_code

        with pytest.raises(httpx2.HTTPError):
            await status(False)  # the handshake (or the first read) fails: no certificate
        assert await status(True) == 401  # through TLS; the key is still required
    finally:
        await running.stop(0)
