"""ExecuteStep over gRPC with API keys and TLS vs plaintext without keys, in one run, interleaved.

Run from the repository root::

    .venv/bin/python -m benchmarks.auth_tls            # full run
    .venv/bin/python -m benchmarks.auth_tls --quick    # smoke run

Two ``agenttx serve`` servers run in this process (``agenttx.server.start``), each on its own
SQLite store: one plain (no keys, plaintext, loopback), one with ``--api-keys`` (a key file of
100 keys, so resolving scans a realistic ring) and TLS (a self-signed P-256 certificate made
here). One async client each (``api_key=`` and ``root_certificates=`` on the secured one) sends
``ExecuteStep`` ``kv.put`` calls one after another, a new transaction every 500 steps (begin and
commit not timed), in blocks that alternate ABBA between the two. What is timed is the client's
whole call (serialize, TLS, the server's key check and step, the reply). Reports each side's
latency (µs; p50, mean, p90, p99), the p50 ratio secured/plain, and each ABBA round's ratio.
Writes ``benchmarks/results/auth_tls.json``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agenttx.auth.keys import hash_secret, new_secret
from agenttx.client import AsyncAgentTxClient
from agenttx.server import RunningServer, ServeConfig, start
from benchmarks.harness import (
    RESULTS_DIR,
    Out,
    bench_parser,
    finish_machine,
    machine_info,
    output_of,
    scratch,
    stats_us,
    write_result,
)

PER_TX = 500


def self_signed(directory: Path) -> tuple[Path, Path]:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class Side:
    """One server, one client, its step loop resumable block by block."""

    def __init__(self, running: RunningServer, client: AsyncAgentTxClient) -> None:
        self.running = running
        self.client = client
        self.samples: list[int] = []
        self.tx = ""
        self.next_step = 1

    async def block(self, n: int, *, timed: bool = True) -> list[int]:
        got: list[int] = []
        for _ in range(n):
            if not self.tx or self.next_step > PER_TX:
                if self.tx:
                    await self.client.commit(self.tx)
                self.tx = (await self.client.begin(agent_id="bench")).transaction_id
                self.next_step = 1
            t0 = time.perf_counter_ns()
            await self.client.execute_step(
                self.tx, self.next_step, "kv.put", {"key": f"k{self.next_step}", "value": 1}
            )
            got.append(time.perf_counter_ns() - t0)
            self.next_step += 1
        if timed:
            self.samples.extend(got)
        return got

    async def close(self) -> None:
        await self.client.close()
        await self.running.stop(0)


async def run(directory: Path, blocks: int, block: int) -> dict[str, Any]:
    cert, key = self_signed(directory)
    secret = new_secret()
    entries = [secret] + [new_secret() for _ in range(99)]
    keys = directory / "keys.toml"
    keys.write_text(
        "".join(
            f'[[key]]\nhash = "{hash_secret(s)}"\nprincipal = "p{i}"\ntenant = "t"\n'
            'roles = ["agent"]\n\n'
            for i, s in enumerate(entries)
        )
    )
    common: dict[str, Any] = {"listen_addr": "127.0.0.1:0", "metrics_addr": None}
    plain_server = await start(ServeConfig(data_dir=directory / "plain", **common))
    secured_server = await start(
        ServeConfig(
            data_dir=directory / "secured", api_keys=keys, tls_cert=cert, tls_key=key, **common
        )
    )
    plain = Side(plain_server, AsyncAgentTxClient(plain_server.address, timeout=30))
    secured = Side(
        secured_server,
        AsyncAgentTxClient(
            secured_server.address,
            api_key=secret,
            root_certificates=cert.read_bytes(),
            timeout=30,
        ),
    )
    try:
        await plain.block(block, timed=False)
        await secured.block(block, timed=False)
        round_ratios: list[float] = []
        for i in range(blocks):
            order = (secured, plain) if i % 2 else (plain, secured)  # ABBA
            got: dict[int, list[int]] = {}
            for side in order:
                got[id(side)] = await side.block(block)
            round_ratios.append(
                statistics.median(got[id(secured)]) / statistics.median(got[id(plain)])
            )
        s, p = stats_us(secured.samples), stats_us(plain.samples)
        return {
            "secured": s,
            "plain": p,
            "p50_ratio": round(s["p50"] / p["p50"], 3),
            "round_p50_ratios": [round(r, 3) for r in round_ratios],
            "steps_per_side": len(plain.samples),
            "keys_in_ring": len(entries),
        }
    finally:
        await secured.close()
        await plain.close()


async def main_async(argv: list[str]) -> int:
    ap = bench_parser(__doc__.splitlines()[0], RESULTS_DIR / "auth_tls.json")
    ap.add_argument("--block", type=int, default=None, help="steps per block (default 200)")
    ap.add_argument("--blocks", type=int, default=None, help="blocks per side (default 10)")
    ns = ap.parse_args(argv)
    out = Out()
    if ns.markdown:
        out.note("no markdown tables for this benchmark; read benchmarks/results/auth_tls.json")
        return 0
    block = ns.block or (50 if ns.quick else 200)
    blocks = ns.blocks or (2 if ns.quick else 10)
    started = time.perf_counter()
    res: dict[str, Any] = {"machine": machine_info(), "quick": ns.quick}
    with scratch("auth-tls") as d:
        res["sqlite"] = await run(d, blocks, block)
    finish_machine(res, started)
    r = res["sqlite"]
    out.table(
        "ExecuteStep with API key + TLS vs plain (µs)",
        ["side", "p50", "mean", "p90", "p99"],
        [[k, r[k]["p50"], r[k]["mean"], r[k]["p90"], r[k]["p99"]] for k in ("plain", "secured")],
    )
    out.note(
        f"p50 ratio secured/plain: {r['p50_ratio']} (rounds "
        f"{min(r['round_p50_ratios'])}–{max(r['round_p50_ratios'])})"
    )
    write_result(out, output_of(ns), res)
    return 0


def main() -> int:
    return asyncio.run(main_async(sys.argv[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
