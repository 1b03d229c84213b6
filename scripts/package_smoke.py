"""Smoke test of an installed AgentTx, run by the interpreter of the environment it is installed in.

tests/repo/test_package.py builds the wheel, installs it into a fresh virtual environment (no
extras) and runs this file there, from a directory outside the source tree, so every import below
comes from the installed package. It checks what a user meets first: the library, the client and the
``agenttx`` command import and run; ``agenttx connect codex --write`` edits a TOML file keeping
what was there (tomlkit is a run-time dependency); an embedded Engine on SQLite does begin ->
kv.put -> commit;
and without the ``postgres`` extra a ``postgresql://`` URL fails at once naming that extra, in
the library and in ``agenttx serve``; without the ``langgraph`` extra,
``agenttx.integrations.langgraph`` fails at import naming that extra (the neutral
``agenttx.integrations`` imports).
Any failure exits non-zero with the reason; the last line printed on success is ``smoke ok``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def check(condition: object, message: str) -> None:
    if not condition:
        raise SystemExit(f"smoke FAILED: {message}")


def installed_here() -> None:
    import agenttx

    where = Path(agenttx.__file__).resolve()
    check(
        where.is_relative_to(Path(sys.prefix).resolve()),
        f"agenttx imported from {where}, not from the environment {sys.prefix}",
    )
    # The build tools and the PostgreSQL driver are extras: a plain install has neither.
    for absent in ("grpc_tools", "psycopg", "psycopg_pool", "langgraph", "langchain_core"):
        check(importlib.util.find_spec(absent) is None, f"{absent} installed without an extra")
    print(f"agenttx {agenttx.__version__} from {where.parent}")


def client_imports() -> None:
    import agenttx
    from agenttx.client import AgentTxClient

    check(agenttx.AgentTxClient is AgentTxClient, "agenttx.AgentTxClient is the client's class")
    check(not any(m.startswith("agenttx.core") for m in sys.modules), "the client loaded core")
    print("client imports")


def command_runs() -> None:
    command = Path(sys.executable).parent / "agenttx"
    done = subprocess.run(
        [str(command), "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    check(done.returncode == 0, f"agenttx --help exited {done.returncode}: {done.stderr}")
    check("serve" in done.stdout, f"agenttx --help does not list serve:\n{done.stdout}")
    print("agenttx --help lists its commands")


def connect_writes_codex_toml(home: Path) -> None:
    """`agenttx connect codex --write` from the wheel: its TOML editor (tomlkit) is a run-time
    dependency, and the entry names this environment's own `agenttx`."""
    import tomllib

    command = Path(sys.executable).parent / "agenttx"
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('model = "o3"  # mine\n', encoding="utf-8")
    env = {**os.environ, "HOME": str(home)}
    env.pop("CODEX_HOME", None)
    done = subprocess.run(
        [str(command), "connect", "codex", "--write"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    check(done.returncode == 0, f"agenttx connect codex --write: {done.stderr}")
    text = config.read_text("utf-8")
    check(text.startswith('model = "o3"  # mine\n'), f"the user's line changed:\n{text}")
    entry = tomllib.loads(text)["mcp_servers"]["agenttx"]
    check(entry["command"] == str(command), f"the entry launches {entry['command']}")
    print("agenttx connect codex --write keeps the file and names this agenttx")


async def engine_commits(data: Path) -> None:
    import agenttx

    engine = await agenttx.Engine.open(f"sqlite:///{data / 'agenttx.db'}")
    try:
        tx = (await engine.begin(agent_id="smoke")).transaction_id
        step = await engine.execute_step(tx, 1, "kv.put", {"key": "greeting", "value": "hi"})
        check(step.status == agenttx.StepStatus.SUCCESS, f"kv.put: {step}")
        check(step.output == {"key": "greeting", "value": "hi"}, f"kv.put output: {step.output}")
        done = await engine.commit(tx)
        check(done.committed and done.steps_committed == 1, f"commit: {done}")
    finally:
        await engine.close()
    print("embedded Engine on SQLite: begin -> kv.put -> commit")


async def postgres_needs_the_extra() -> None:
    import agenttx
    from agenttx.errors import StartupError

    started = time.monotonic()
    try:
        engine = await agenttx.Engine.open("postgresql://agenttx@127.0.0.1:5432/agenttx")
    except StartupError as exc:
        check("pip install 'agenttx[postgres]'" in str(exc), f"message names no extra: {exc}")
        check(time.monotonic() - started < 5, "the missing driver was not reported at once")
        print(f"postgresql:// without the extra: {exc}")
        return
    await engine.close()
    check(False, "a postgresql:// URL opened without psycopg installed")


def serve_needs_the_extra(data: Path) -> None:
    command = Path(sys.executable).parent / "agenttx"
    url = "postgresql://agenttx@127.0.0.1:5432/agenttx"
    args = [str(command), "serve", "--store", url, "--data-dir", str(data)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=30)
    except subprocess.TimeoutExpired:
        check(False, "agenttx serve on postgresql:// without the extra kept running")
        return
    check(done.returncode != 0, "agenttx serve on postgresql:// without the extra exited 0")
    check("pip install 'agenttx[postgres]'" in done.stderr, f"serve said: {done.stderr}")
    print("agenttx serve on postgresql:// without the extra exits naming it")


def langgraph_needs_the_extra() -> None:
    import agenttx.integrations

    check(agenttx.integrations.provider_name("kv.put") == "kv--put", "the neutral core imports")
    try:
        import agenttx.integrations.langgraph  # the import is the check
    except ImportError as exc:
        check("pip install 'agenttx[langgraph]'" in str(exc), f"message names no extra: {exc}")
        print(f"agenttx.integrations.langgraph without the extra: {exc}")
        return
    check(False, "agenttx.integrations.langgraph imported without LangGraph installed")


def main() -> int:
    installed_here()
    client_imports()
    command_runs()
    with tempfile.TemporaryDirectory(prefix="agenttx-smoke-") as tmp:
        connect_writes_codex_toml(Path(tmp))
    with tempfile.TemporaryDirectory(prefix="agenttx-smoke-") as tmp:
        asyncio.run(engine_commits(Path(tmp)))
    asyncio.run(postgres_needs_the_extra())
    with tempfile.TemporaryDirectory(prefix="agenttx-smoke-") as tmp:
        serve_needs_the_extra(Path(tmp))
    langgraph_needs_the_extra()
    print("smoke ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
