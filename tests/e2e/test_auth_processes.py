"""Keys and principals in real processes: ``agenttx serve --api-keys`` reloads its key file on
SIGHUP; ``agenttx mcp`` on stdio acts as its configured principal and tenant, and
``agenttx mcp --server`` reaches a keyed server with ``--api-key``."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import grpc
import pytest

import agenttx
from agenttx.auth.keys import hash_secret, new_secret
from agenttx.client import AgentTxClient, RetryPolicy
from agenttx.wire import agenttx_pb2 as pb
from mcp_harness import stdio_client, structured
from server_process import start_server


def key_table(secret: str, principal: str, tenant: str, role: str = "agent") -> str:
    return (
        f'[[key]]\nhash = "{hash_secret(secret)}"\nprincipal = "{principal}"\n'
        f'tenant = "{tenant}"\nroles = ["{role}"]\n\n'
    )


def test_sighup_reloads_the_key_file(tmp_path: Path) -> None:
    old, new = new_secret(), new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(key_table(old, "ann", "acme"))
    server = start_server(tmp_path / "data", "--api-keys", str(keys))
    with server.killed_on_error():
        with server.channel() as channel:
            stub = server.stub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.ListTools(pb.ListToolsRequest(), timeout=5)
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
            auth = [("authorization", f"Bearer {old}")]
            stub.ListTools(pb.ListToolsRequest(), metadata=auth, timeout=5)

            keys.write_text(key_table(new, "ann", "acme"))  # rotate: old out, new in
            server.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while not any(
                r.get("msg", "").startswith("keys reloaded") for r in server.log_records()
            ):
                assert time.monotonic() < deadline, server.log_text()
                time.sleep(0.05)
            stub.ListTools(
                pb.ListToolsRequest(), metadata=[("authorization", f"Bearer {new}")], timeout=5
            )
            with pytest.raises(grpc.RpcError) as revoked:
                stub.ListTools(pb.ListToolsRequest(), metadata=auth, timeout=5)
            assert revoked.value.code() is grpc.StatusCode.UNAUTHENTICATED
        text = server.log_text()
        assert old not in text
        assert new not in text  # no key is ever logged
    assert server.terminate() == 0


@pytest.mark.parametrize("emptied", ["", "\n  \n", "# every key was here\n"])
def test_sighup_with_a_key_file_emptied_keeps_the_keys_in_force(
    tmp_path: Path, emptied: str
) -> None:
    """A key file truncated to nothing (an editor saving, a copy half done) is no "0 keys":
    it is refused like a broken one, said in the log, and every key in force keeps working."""
    secret = new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(key_table(secret, "ann", "acme"))
    server = start_server(tmp_path / "data", "--api-keys", str(keys))
    with server.killed_on_error():
        keys.write_text(emptied)
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while not any(
            r.get("msg", "").startswith("keys not reloaded") for r in server.log_records()
        ):
            assert time.monotonic() < deadline, server.log_text()
            time.sleep(0.05)
        (refused,) = [
            r for r in server.log_records() if r.get("msg", "").startswith("keys not reloaded")
        ]
        assert refused["level"] == "error"
        assert "the 1 in force stay" in refused["msg"]
        assert "holds no key" in refused["msg"]
        assert not any(r.get("msg", "").startswith("keys reloaded") for r in server.log_records())
        with server.channel() as channel:
            auth = [("authorization", f"Bearer {secret}")]
            server.stub(channel).ListTools(pb.ListToolsRequest(), metadata=auth, timeout=5)
    assert server.terminate() == 0


async def test_mcp_on_stdio_acts_as_its_principal_and_through_a_keyed_server(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    async with stdio_client(data, "auto", "--principal", "laptop-agent", "--tenant", "acme") as c:
        tx = structured(await c.call_tool("begin_transaction", {"agent_id": "a"}))["transaction_id"]
    engine = await agenttx.Engine.open(f"sqlite:///{data / 'agenttx.db'}", background=False)
    try:
        info = await engine.get_transaction(tx)
        assert (info.principal, info.tenant) == ("laptop-agent", "acme")
    finally:
        await engine.close()

    # The same store served with keys: the tenant's key sees it, through `agenttx mcp --server`.
    secret = new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(key_table(secret, "laptop-agent", "acme"))
    server = start_server(data, "--api-keys", str(keys))
    with server.killed_on_error():
        async with stdio_client(
            tmp_path / "unused", "auto", "--server", server.address, "--api-key", secret
        ) as c:
            got = structured(await c.call_tool("get_transaction", {"transaction_id": tx}))
            assert got["transaction_id"] == tx

        def other_tenant() -> None:
            other = new_secret()
            keys.write_text(key_table(secret, "laptop-agent", "acme") + key_table(other, "x", "b"))
            server.proc.send_signal(signal.SIGHUP)
            with AgentTxClient(
                server.address, api_key=other, retry=RetryPolicy(max_attempts=1), timeout=5
            ) as client:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        client.get_transaction(tx)
                    except agenttx.Unauthenticated:
                        assert time.monotonic() < deadline
                        time.sleep(0.05)
                        continue
                    except agenttx.NotFound:
                        return
                    raise AssertionError("another tenant's key read the transaction")

        await asyncio.to_thread(other_tenant)
    assert server.terminate() == 0


def test_the_cli_calls_a_keyed_tls_server_with_its_environment(tmp_path: Path) -> None:
    import subprocess

    from server_process import TESTS_DIR, agenttx_command, server_env
    from test_auth_server import self_signed

    cert, key = self_signed(tmp_path)
    secret = new_secret()
    keys = tmp_path / "keys.toml"
    keys.write_text(key_table(secret, "ops", "acme", "admin"))
    server = start_server(
        tmp_path / "data",
        "--api-keys",
        str(keys),
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
    )
    with server.killed_on_error():

        def tools(**env: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                agenttx_command("tools", "--server", server.address, "--json"),
                cwd=TESTS_DIR,
                env=server_env(env),
                capture_output=True,
                text=True,
                timeout=60,
            )

        ok = tools(AGENTTX_API_KEY=secret, AGENTTX_TLS_CA=str(cert))
        assert ok.returncode == 0, ok.stderr
        assert "kv.put" in ok.stdout
        refused = tools(AGENTTX_TLS_CA=str(cert))
        assert refused.returncode == 1
        assert "UNAUTHENTICATED" in refused.stderr
        # The demo takes the same environment: the key and the CA.
        demo = subprocess.run(
            agenttx_command("demo", "--server", server.address),
            cwd=TESTS_DIR,
            env=server_env({"AGENTTX_API_KEY": secret, "AGENTTX_TLS_CA": str(cert)}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "commit" in demo.stdout
    assert server.terminate() == 0
