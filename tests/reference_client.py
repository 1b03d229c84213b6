"""A client built from the reference's proto and nothing of ours, for the wire-compatibility tests.

``reference_subset.proto`` holds the reference's five RPCs and their fields. Its messages have
the same full names (``agenttx.v1.*``) as ours, and protobuf's default descriptor pool holds one
definition per name per process, so the reference client always runs in a subprocess of its
own. A test gives only the driver's BODY, what the client does; the driver around it is
always the same:

- the preamble puts the generated code on the path and binds ``pb``, ``pb_grpc``, ``grpc``,
  ``json``, ``sys``, ``target`` (the server's address), ``args`` (the test's extra strings) and
  ``stub`` (a blocking stub on ``target``);
- the body records what the client sees in a JSON-able ``seen``;
- the epilogue checks that nothing of ours was imported, then prints ``seen`` as JSON, which
  :meth:`ReferenceClient.run` parses and returns.

Invariant: the code is generated once per test session (the ``reference_client`` fixture,
registered by ``pytest_plugins = ["reference_client"]`` in the modules that use it), and the
driver runs with a working directory of its own, so only the generated code and installed
packages are importable by name from it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from grpc_tools import protoc

REFERENCE_PROTO = Path(__file__).parent / "reference_subset.proto"
DRIVER_SECONDS = 60  # far above any driver's run (well under a second): only a hang reaches it

PREAMBLE = r"""
import importlib, json, sys
from pathlib import Path

import grpc

sys.path.insert(0, sys.argv[1])
pb = importlib.import_module("reference_subset_pb2")
pb_grpc = importlib.import_module("reference_subset_pb2_grpc")
target, args = sys.argv[2], sys.argv[3:]
stub = pb_grpc.AgentTxServiceStub(grpc.insecure_channel(target))
"""

EPILOGUE = r"""
assert not [m for m in sys.modules if m.split(".")[0] == "agenttx"], "imported our code"
print(json.dumps(seen))
"""


def generate(out: Path) -> Path:
    """Write the reference's message and stub modules into ``out``; return ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"  # the well-known types protoc needs
    argv = [
        "protoc",
        f"-I{REFERENCE_PROTO.parent}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        str(REFERENCE_PROTO),
    ]
    if protoc.main(argv) != 0:
        raise RuntimeError(f"protoc could not generate the reference client from {REFERENCE_PROTO}")
    return out


class ReferenceClient:
    """Runs driver bodies against a server, on code generated once."""

    def __init__(self, generated: Path, workdirs: pytest.TempPathFactory) -> None:
        self.generated = generated  # holds reference_subset_pb2{,_grpc}.py; never rewritten
        self._workdirs = workdirs  # a fresh directory per run, so runs share no files

    async def run(self, body: str, target: str, *args: str) -> Any:
        """Run ``body`` as the reference client against ``target``; return what it printed.

        A driver that exits non-zero, runs past ``DRIVER_SECONDS`` or prints something other
        than JSON fails the test with its exit code and stderr, so the reason is in the report.
        """
        workdir = self._workdirs.mktemp("reference_driver")
        driver = workdir / "reference_driver.py"
        driver.write_text(PREAMBLE + body + EPILOGUE)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(driver),
            str(self.generated),
            target,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workdir,  # nothing of ours on the path
        )
        try:
            async with asyncio.timeout(DRIVER_SECONDS):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            pytest.fail(
                f"the reference client ({driver}) ran past {DRIVER_SECONDS} s", pytrace=False
            )
        if proc.returncode != 0:
            pytest.fail(
                f"the reference client ({driver}) exited with {proc.returncode}:\n"
                f"{err.decode(errors='replace')}",
                pytrace=False,
            )
        try:
            return json.loads(out)
        except ValueError:
            pytest.fail(
                f"the reference client ({driver}) printed no JSON:\n"
                f"stdout: {out.decode(errors='replace')!r}\n"
                f"stderr: {err.decode(errors='replace')}",
                pytrace=False,
            )


@pytest.fixture(scope="session")
def reference_client(tmp_path_factory: pytest.TempPathFactory) -> ReferenceClient:
    """The reference client, generated once for the whole session."""
    generated = generate(tmp_path_factory.mktemp("reference_generated"))
    return ReferenceClient(generated, tmp_path_factory)
