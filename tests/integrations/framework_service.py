"""The services a framework's run talks to, for every framework's tests (registered with
``pytest_plugins = ["framework_service"]``). A suite names its framework's tools module once,
by overriding ``framework_tools``::

    @pytest.fixture(scope="module")
    def framework_tools() -> ModuleType:
        return lg_tools

and gets, with that module's ``TOOLS`` loaded:

- ``service``: each test twice, ``[embedded]`` on the engine itself and ``[remote]`` on the
  async client of a gRPC server in front of it (``served_engine``), the same test code;
- ``served_client``: the async client of one real ``agenttx serve --tools <file>:TOOLS``
  subprocess per module, which imports the tools module as a user's file is imported.

Invariant: every engine, server and client made here is closed when its test (or, for the
subprocess, its module) ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

import agenttx
from agenttx.client import AsyncAgentTxClient, RetryPolicy
from agenttx.service import TransactionService
from server_process import ServerProcess, start_server

if TYPE_CHECKING:
    from served_engine import Served

pytest_plugins = ["served_engine"]


@pytest.fixture(params=["embedded", "remote"])
async def service(
    request: pytest.FixtureRequest,
    framework_tools: ModuleType,
    open_engine: Callable[..., Awaitable[agenttx.Engine]],
    serve: Callable[..., Awaitable[Served]],
) -> AsyncIterator[TransactionService]:
    """The engine itself, or the async client of a server in front of it: both load TOOLS."""
    if request.param == "embedded":
        yield await open_engine(tools=framework_tools.TOOLS)
    else:
        yield (await serve(tools=framework_tools.TOOLS)).client


@pytest.fixture(scope="module")
def served_tools(
    framework_tools: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """``agenttx serve`` loading the framework module's file, as a user serves their tools."""
    data = tmp_path_factory.mktemp(framework_tools.__name__) / "data"
    proc = start_server(data, "--tools", f"{framework_tools.__file__}:TOOLS")
    yield proc
    proc.terminate()


@pytest.fixture
async def served_client(served_tools: ServerProcess) -> AsyncIterator[AsyncAgentTxClient]:
    async with AsyncAgentTxClient(
        served_tools.address, retry=RetryPolicy(max_attempts=1), timeout=30
    ) as c:
        yield c
