"""Every fenced example in README.md, docs/ and the benchmarks' detail pages
(``benchmarks/results/*.md``) is run here, or says visibly why it is not.

A block is either *claimed* by an entry of ``RUNS`` (its page and first line → how it runs:
Python against an embedded engine or a real ``agenttx serve``, shell commands against a real
server, TOML through the loader that reads such a file, JSON parsed, a source excerpt found in
the source), or the line just above it (blank lines aside) is a visible marker::

    *Not run: why not.*

A new example with neither fails ``test_every_example_is_run_or_says_why_not``, naming the page
and line; a claim whose block is gone fails too, so the list stays the list of what runs. The
README's Python tours are run by ``tests/repo/test_readme.py``, and its first block (``make run``,
``make test``) is the command this suite runs under: both are claimed here by name.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import agenttx
from http_harness import http_base
from server_process import AGENTTX, ServerProcess, server_env, start_server

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    # the detail pages docs/benchmarks.md summarises, held to the same rules
    *sorted((ROOT / "benchmarks" / "results").glob("*.md")),
]
FENCE = re.compile(r"^([ \t]*)```([^\n]*)\n(.*?)^[ \t]*```[^\n]*$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"^\*Not run: .+\*$")
DOC_TARGET = "127.0.0.1:50051"


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository, e.g. "docs/api.md"
    line: int  # of the opening fence
    language: str
    text: str  # dedented
    caption: str  # the nearest non-blank line above the fence

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0] if self.text else ""


def blocks() -> list[Block]:
    found: list[Block] = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            above = [line.strip() for line in text[: m.start()].splitlines() if line.strip()]
            found.append(
                Block(
                    page=str(page.relative_to(ROOT)),
                    line=text[: m.start()].count("\n") + 1,
                    language=m.group(2).strip(),
                    text=textwrap.dedent(m.group(3)),
                    caption=above[-1] if above else "",
                )
            )
    return found


def find(page: str, first_line: str) -> Block:
    [block] = [b for b in blocks() if b.page == page and b.first_line.startswith(first_line)]
    return block


# ------------------------------------------------------------------------- the runners


def _cli_env(server: ServerProcess | None = None, **extra: str) -> dict[str, str]:
    bin_dir = str(AGENTTX.parent) if AGENTTX.exists() else str(Path(sys.executable).parent)
    env = server_env({"PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")})
    if server is not None:
        env["AGENTTX_SERVER"] = server.address
    env.update(extra)
    return env


def _serve(cwd: Path, *flags: str) -> ServerProcess:
    """``agenttx serve`` with its data in ``cwd/agenttx-data``, where the docs put it."""
    return start_server(cwd / "agenttx-data", *flags, env={"AGENTTX_METRICS_ADDR": "off"})


def _engine_namespace(tmp_path: Path) -> dict[str, Any]:
    return {"agenttx": agenttx, "asyncio": asyncio, "os": os, "tmp_path": tmp_path}


async def _exec_async(code: str, namespace: dict[str, Any]) -> None:
    """Run ``code`` as a module body in which ``await`` and ``async for`` may stand at the top."""
    compiled = compile(code, "<docs example>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)  # the docs' own examples
    if asyncio.iscoroutine(result):
        await result


def with_engine(setup: str = "", check: str = "") -> Callable[[Block, Path], None]:
    """The block runs with ``engine`` open on a fresh SQLite store (``setup`` first, ``check``
    after, in the same namespace), as a fragment of the user's own async code."""

    def run(block: Block, tmp_path: Path) -> None:
        async def main() -> None:
            namespace = _engine_namespace(tmp_path)
            namespace["engine"] = await agenttx.Engine.open(
                f"sqlite:///{tmp_path / 'agenttx.db'}",
                fs_root=tmp_path / "files",
                outbox_path=tmp_path / "outbox.jsonl",
            )
            try:
                await _exec_async(setup, namespace)
                await _exec_async(block.text, namespace)
                await _exec_async(check, namespace)
            finally:
                await namespace["engine"].close()

        asyncio.run(main())

    return run


def as_program(code: str) -> str:
    """``code`` as a program: as it is, or, when it awaits at the top (a fragment of async
    code, as the docs show it), as the body of a coroutine that ``asyncio.run`` runs."""
    try:
        compile(code, "<docs example>", "exec")
    except SyntaxError:
        body = textwrap.indent(code, "    ")
        return f"import asyncio, os, agenttx\nasync def main():\n{body}\nasyncio.run(main())\n"
    return code


def script(env: dict[str, str] | None = None, check: str = "") -> Callable[[Block, Path], None]:
    """The block runs as a program of its own, in a fresh interpreter in an empty directory
    (top-level ``await`` wrapped in ``asyncio.run``); ``check`` then runs in this process."""

    def run(block: Block, tmp_path: Path) -> None:
        code = as_program(block.text)
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=server_env(env),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        if check:
            exec(check, {"tmp_path": tmp_path, "sqlite3": sqlite3})

    return run


def client_script(check_output: str = "") -> Callable[[Block, Path], None]:
    """The block runs as a program against a real ``agenttx serve`` (the docs' address
    replaced by the server's); its output must contain ``check_output``."""

    def run(block: Block, tmp_path: Path) -> None:
        server = _serve(tmp_path)
        try:
            code = as_program(block.text.replace(DOC_TARGET, server.address))
            done = subprocess.run(
                [sys.executable, "-c", code],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert check_output in done.stdout
        finally:
            server.terminate()

    return run


PLACEHOLDER_TX = re.compile(r"tx_[0-9a-f]*…|tx_[0-9a-f]{32}")
COMMENT = re.compile(r"\s+#\s.*$")


def shell_commands(text: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and comment lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands = []
    for line in joined.splitlines():
        line = COMMENT.sub("", line).strip()
        if line and not line.startswith("#"):
            commands.append(line)
    return commands


def cli(
    prepare: Callable[[ServerProcess, Path], dict[str, str]] | None = None,
    http: bool = False,
) -> Callable[[Block, Path], None]:
    """Each command of the block runs in a shell against a real ``agenttx serve`` (its
    address in ``AGENTTX_SERVER``, the docs' address replaced), in the directory that holds the
    server's ``agenttx-data``, and must exit 0. A shortened transaction id (``tx_9a73…``) stands
    for a real one: the one the block began (``began tx_…``), else the one ``prepare`` made
    (``TX`` in what it returns, which also goes into the environment)."""

    def run(block: Block, tmp_path: Path) -> None:
        server = _serve(tmp_path, *(["--http-addr", "127.0.0.1:0"] if http else []))
        try:
            extra = prepare(server, tmp_path) if prepare else {}
            env = _cli_env(server, **extra)
            tx = extra.get("TX", "")
            for command in shell_commands(block.text):
                command = command.replace(DOC_TARGET, server.address)
                if http:
                    command = command.replace("localhost:8080", http_base(server))
                command = PLACEHOLDER_TX.sub(tx, command)  # an id has no backslash
                done = subprocess.run(
                    ["bash", "-c", command],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                assert done.returncode == 0, (command, done.stdout, done.stderr)
                if began := re.search(r"\bbegan (tx_[0-9a-f]+)", done.stdout):
                    tx = began.group(1)
                if http and (made := re.search(r'"transaction_id":\s*"(tx_\w+)"', done.stdout)):
                    env["TX"] = tx = env.get("TX") or made.group(1)
        finally:
            server.terminate()

    return run


def _tx_with_steps(server: ServerProcess, tmp_path: Path) -> dict[str, str]:
    """A transaction with three kv.put steps, begun and stepped through the CLI."""
    env = _cli_env(server)

    def agenttx_cli(*args: str) -> str:
        done = subprocess.run(
            ["agenttx", *args], env=env, capture_output=True, text=True, timeout=120, check=True
        )
        return done.stdout

    began = re.search(r"\bbegan (tx_[0-9a-f]+)", agenttx_cli("tx", "begin"))
    assert began, "tx begin printed no id"
    tx = began.group(1)
    for step in (1, 2, 3):
        agenttx_cli("tx", "step", tx, str(step), "kv.put", json.dumps({"key": f"k{step}"}))
    return {"TX": tx}


def _committed_tx(server: ServerProcess, tmp_path: Path) -> dict[str, str]:
    made = _tx_with_steps(server, tmp_path)
    subprocess.run(
        ["agenttx", "tx", "commit", made["TX"]],
        env=_cli_env(server),
        capture_output=True,
        timeout=120,
        check=True,
    )
    (tmp_path / "backups").mkdir()
    with (
        sqlite3.connect(tmp_path / "agenttx-data" / "agenttx.db") as src,
        sqlite3.connect(tmp_path / "backups" / "agenttx.db") as dst,
    ):
        src.backup(dst)
    return made


def home(server: ServerProcess, tmp_path: Path) -> dict[str, str]:
    """A HOME of the test's own, so ``connect --write`` never touches the real one."""
    (tmp_path / "home").mkdir()
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config")}


def toml_file(
    load: Callable[[Path], Any], env: dict[str, str] | None = None
) -> Callable[..., None]:
    """The block, written to a file, is read by the loader that reads such files at start."""

    def run(block: Block, tmp_path: Path) -> None:
        path = tmp_path / "example.toml"
        path.write_text(block.text)
        saved = {k: os.environ.get(k) for k in env or {}}
        os.environ.update(env or {})
        try:
            assert load(path)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    return run


def json_value(check: Callable[[Any], bool] = lambda value: True) -> Callable[..., None]:
    def run(block: Block, tmp_path: Path) -> None:
        assert check(json.loads(block.text))

    return run


def excerpt_of(source: str) -> Callable[..., None]:
    """The block quotes ``source``: its text, whitespace aside, is there."""

    def run(block: Block, tmp_path: Path) -> None:
        def squeeze(text: str) -> str:
            return re.sub(r"\s+", "", text)

        assert squeeze(block.text) in squeeze((ROOT / source).read_text())

    return run


def covered_elsewhere(test: str) -> Callable[..., None]:
    """The block is run by another test module of the suite (which must exist), named by its
    path under tests/ (``repo/test_readme.py``)."""

    def run(block: Block, tmp_path: Path) -> None:
        assert (ROOT / "tests" / test).is_file(), f"tests/{test} is gone"

    return run


def _gateway(path: Path) -> Any:
    from agenttx.gateway.config import load_gateway

    return load_gateway(path)


def _hint_rules(path: Path) -> Any:
    from agenttx.core.hints.rules import load_rule_file

    return load_rule_file(path)


def _policy(path: Path) -> Any:
    from agenttx.core.safety import load_safety_policy

    return load_safety_policy(path)


def _keys(path: Path) -> Any:
    from agenttx.auth.keys import read_key_file

    return read_key_file(path)


def _audit_keys(path: Path) -> Any:
    from agenttx.audit_keys import read_audit_keys

    path.chmod(0o600)  # the reader refuses a key file others may read
    return read_audit_keys(path)


def _audit_record_keys(value: Any) -> bool:
    return set(value) == {"at", "data", "hash", "kind", "prev", "revision", "seq", "tenant", "tx"}


UNDO_SETUP = """
tx = (await engine.begin()).transaction_id
await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
"""
UNDO_CHECK = """
assert u.step_id == 1 and u.next_step_id == 1, u
assert d.step_id == 1 and d.next_step_id == 2, d
"""
ISOLATION_CHECK = """
tx = (await engine.begin()).transaction_id
await engine.execute_step(tx, 1, "kv.put", {"key": "counter/hits", "value": 0})
await engine.commit(tx)
await asyncio.gather(*(add_one(engine, "counter/hits") for _ in range(3)))
tx = (await engine.begin()).transaction_id
got = await engine.execute_step(tx, 1, "kv.get", {"key": "counter/hits"})
assert got.output["value"] == 3, got
"""
AUDIT_SETUP = """
tx = (await engine.begin()).transaction_id
await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
await engine.commit(tx)
"""
AUDIT_CHECK = "assert v.ok and records, (v, records)"
TOUR_CHECK = """
with sqlite3.connect(tmp_path / "agenttx-data" / "agenttx.db") as db:
    got = sorted(row[0] for row in db.execute("select status from transactions"))
    assert got == ["COMMITTED", "ROLLED_BACK"], got
"""
BACKUP_CHECK = """
with sqlite3.connect(tmp_path / "backups" / "agenttx.db") as db:
    assert db.execute("select count(*) from transactions").fetchone()[0] == 1
"""


def _prepare_backup_source(tmp_path: Path) -> None:
    """A store with one committed transaction in ``agenttx-data/``, and ``backups/``."""

    async def main() -> None:
        engine = await agenttx.Engine.open(
            f"sqlite:///{tmp_path / 'agenttx-data' / 'agenttx.db'}",
            fs_root=tmp_path / "files",
            outbox_path=tmp_path / "outbox.jsonl",
        )
        tx = (await engine.begin()).transaction_id
        await engine.execute_step(tx, 1, "kv.put", {"key": "a", "value": 1})
        await engine.commit(tx)
        await engine.close()

    (tmp_path / "agenttx-data").mkdir()
    (tmp_path / "backups").mkdir()
    asyncio.run(main())


def backup_script(check: str) -> Callable[[Block, Path], None]:
    def run(block: Block, tmp_path: Path) -> None:
        _prepare_backup_source(tmp_path)
        script(check=check)(block, tmp_path)

    return run


def backup_shell(block: Block, tmp_path: Path) -> None:
    _prepare_backup_source(tmp_path)
    for command in shell_commands(block.text):
        subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True, timeout=60)
    [copy] = (tmp_path / "backups").glob("agenttx-*.db")
    with sqlite3.connect(copy) as db:
        assert db.execute("select count(*) from transactions").fetchone()[0] == 1


# docs/api.md's lookup: a transaction committed with a previewed receipt, its step sent with
# a request id; the check asks the engine for what the example's variables claim.
FIND_SETUP = """
tx = (await engine.begin()).transaction_id
await engine.execute_step(tx, 1, "kv.put", {"key": "k", "value": 1}, request_id="step-1")
preview = await engine.preview_commit(tx)
await engine.commit(tx, receipt_id=preview.receipt_id)
"""
FIND_CHECK = """
assert found.receipts[0].receipt_id == preview.receipt_id
assert (await engine.get_transaction(tx)).status is agenttx.TxStatus.COMMITTED
"""

# (page, the block's first line or its start) → how it runs
RUNS: dict[tuple[str, str], Callable[[Block, Path], None]] = {
    ("README.md", "make run"): covered_elsewhere("repo/test_readme.py"),
    ("README.md", "import asyncio, uuid, agenttx"): covered_elsewhere("repo/test_readme.py"),
    ("README.md", "@agenttx.tool("): covered_elsewhere("repo/test_readme.py"),
    ("README.md", "from agenttx import AgentTurn"): covered_elsewhere("repo/test_readme.py"),
    ("docs/api.md", "from agenttx.client import AgentTxClient"): client_script(),
    ("docs/api.md", "from agenttx.client import AsyncAgentTxClient"): client_script("COMMITTED"),
    ("docs/api.md", "found = await engine.find_transaction"): with_engine(FIND_SETUP, FIND_CHECK),
    ("docs/audit.md", '{"at":'): json_value(_audit_record_keys),
    ("docs/audit.md", "v = await engine.verify_audit"): with_engine(AUDIT_SETUP, AUDIT_CHECK),
    ("docs/audit.md", "agenttx audit verify tx_42d3"): cli(_committed_tx),
    ("docs/audit.md", "agenttx audit anchor"): cli(_committed_tx),
    ("docs/audit.md", 'sign = "2026-12"'): toml_file(_audit_keys),
    ("docs/audit.md", "umask 077; agenttx audit new-key"): cli(),
    ("docs/connect.md", "agenttx connect"): cli(home),
    ("docs/effects.md", "engine = await agenttx.Engine.open("): script(
        env={"AGENTTX_WEBHOOK_SECRET": "s3cr3t-for-the-docs-example"}
    ),
    ("docs/gateway.md", "[servers.files]"): toml_file(_gateway, {"TICKETS_TOKEN": "t0ken"}),
    ("docs/gateway.md", "[servers.store]"): toml_file(_gateway),
    ("docs/hints.md", "[[rule]]"): toml_file(_hint_rules),
    ("docs/http.md", "curl -s -X POST"): cli(http=True),
    ("docs/http.md", "HttpRoute("): excerpt_of("src/agenttx/api/operations/table.py"),
    ("docs/http.md", '{"error":'): json_value(lambda v: v["error"]["reason"] == "WRONG_STEP"),
    ("docs/integrations.md", "import asyncio"): script(),
    ("docs/integrations.md", "# The Agents SDK shape"): script(),
    ("docs/integrations.md", "# pip install 'agenttx[pydantic-ai]'"): script(),
    ("docs/isolation.md", "tx = await engine.begin(isolation="): with_engine(),
    ("docs/isolation.md", "async def add_one("): with_engine(check=ISOLATION_CHECK),
    ("docs/operations.md", '{"ts":'): json_value(lambda v: v["rpc"] == "ExecuteStep"),
    ("docs/operations.md", "sqlite3 agenttx-data/agenttx.db"): backup_shell,
    ("docs/operations.md", "import sqlite3"): backup_script(BACKUP_CHECK),
    ("docs/operations.md", "agenttx tx list --status ACTIVE"): cli(_tx_with_steps),
    ("docs/operations.md", "agenttx tx begin"): cli(),
    ("docs/operations.md", "agenttx tx step tx_9a73… 4 kv.put"): cli(_tx_with_steps),
    ("docs/operations.md", "agenttx audit verify tx_9a73"): cli(_committed_tx),
    ("docs/packaging.md", "pip install ."): covered_elsewhere("repo/test_package.py"),
    ("README.md", "pip install ."): covered_elsewhere("repo/test_package.py"),
    ("docs/transactions.md", "engine = await agenttx.Engine.open("): script(check=TOUR_CHECK),
    ("docs/references.md", "{"): json_value(lambda v: v["user_id"] == "${steps.1.id}"),
    ("docs/safety.md", "[approval]"): toml_file(_policy),
    ("docs/security.md", "agenttx keys new"): cli(),
    ("docs/security.md", "[[key]]"): toml_file(_keys),
    ("docs/undo.md", "u = await engine.undo_step"): with_engine(UNDO_SETUP, UNDO_CHECK),
}


def _claim(block: Block) -> tuple[str, str] | None:
    for page, start in RUNS:
        if block.page == page and block.first_line.startswith(start):
            return (page, start)
    return None


def test_every_example_is_run_or_says_why_not() -> None:
    loose = [
        f"{b.page}:{b.line}: a ```{b.language} block that no entry of RUNS in "
        "tests/repo/test_docs_examples.py runs; add one, or put '*Not run: why.*' on the line above"
        for b in blocks()
        if _claim(b) is None and not NOT_RUN.match(b.caption)
    ]
    assert loose == []


def test_every_claim_names_one_block() -> None:
    claimed: dict[tuple[str, str], int] = dict.fromkeys(RUNS, 0)
    for b in blocks():
        if (key := _claim(b)) is not None:
            claimed[key] += 1
    assert {k: n for k, n in claimed.items() if n != 1} == {}


def test_no_block_is_both_run_and_marked_not_run() -> None:
    both = [f"{b.page}:{b.line}" for b in blocks() if _claim(b) and NOT_RUN.match(b.caption)]
    assert both == []


@pytest.mark.parametrize(("page", "start"), list(RUNS), ids=[f"{p}:{s[:24]}" for p, s in RUNS])
def test_the_example_runs(page: str, start: str, tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.fail("bash is needed to run the docs' shell examples")
    RUNS[(page, start)](find(page, start), tmp_path)
