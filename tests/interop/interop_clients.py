"""The MCP clients other than ours that the interop tests run against AgentTx, and the one
scenario they all play (``every_tool.json``: every tool, in an agent's and an approver's
order).

Node clients are npm packages at pinned versions, installed by the test set-up into a cache
directory outside the tree (once, under the install lock; later runs reuse it). Without node
and npm, or with the registry unreachable, their tests are skipped with that reason, except
under CI, where they fail.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from install_lock import npm_install
from install_lock import unavailable as unavailable_here
from mcp_harness import mcp_command
from server_process import ServerProcess, start_server

HERE = Path(__file__).parent
SCENARIO = HERE / "every_tool.json"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agenttx-tests"

# The operator's two outbox tools are offered too, so every tool AgentTx has is listed.
EFFECT_TOOLS_STDIO = ("--mcp-effect-tools",)
EFFECT_TOOLS_SERVE = ("--mcp-effect-tools",)


def unavailable(reason: str) -> NoReturn:
    unavailable_here("the interop clients are", reason)


def npm_package(name: str, version: str, installed: str, *flags: str) -> Path:
    """``name@version`` installed into its own prefix under the cache; the prefix's
    ``node_modules``. ``installed``: a path under it that exists once the install is done."""
    prefix = CACHE / f"{name.lstrip('@').replace('/', '-')}-{version}"
    problem = npm_install(prefix, installed, [f"{name}@{version}"], *flags)
    if problem:
        unavailable(problem)
    return prefix / "node_modules"


def scenario() -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = json.loads(SCENARIO.read_text())["calls"]
    return calls


def resolve(value: Any, saved: dict[str, dict[str, Any]]) -> Any:
    """A call's arguments with each ``{"$saved": "NAME.field"}`` replaced by that field of the
    result saved as NAME (``ts_sdk_client.mjs`` does the same)."""
    if isinstance(value, list):
        return [resolve(v, saved) for v in value]
    if isinstance(value, dict):
        if list(value) == ["$saved"]:
            name, field = value["$saved"].split(".")
            return saved[name][field]
        return {k: resolve(v, saved) for k, v in value.items()}
    return value


def stdio_command(data_dir: Path) -> list[str]:
    """``agenttx mcp`` on ``data_dir`` with every tool (the test tools, the outbox's)."""
    return mcp_command(data_dir, *EFFECT_TOOLS_STDIO)


@contextmanager
def http_server(data_dir: Path) -> Iterator[str]:
    """``agenttx serve --http-addr`` with every MCP tool; yields its ``/mcp`` URL."""
    proc: ServerProcess = start_server(data_dir, "--http-addr", "127.0.0.1:0", *EFFECT_TOOLS_SERVE)
    with proc.killed_on_error():
        [record] = [r for r in proc.log_records() if r.get("event") == "serving"]
        yield str(record["mcp_http"])
    assert proc.terminate() == 0
