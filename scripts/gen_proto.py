"""Generate the gRPC Python code from proto/agenttx/v1/agenttx.proto (run by the build).

The generated modules live in src/agenttx/wire/ (ignored by git): agenttx_pb2.py,
agenttx_pb2_grpc.py and agenttx_pb2.pyi. protoc writes the stub's import as a top-level
``import agenttx_pb2``; it is rewritten to the package path so nothing needs sys.path tricks.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto" / "agenttx" / "v1"
OUT = ROOT / "src" / "agenttx" / "wire"


def main() -> int:
    from grpc_tools import protoc

    OUT.mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"-I{include}",
            f"--python_out={OUT}",
            f"--pyi_out={OUT}",
            f"--grpc_python_out={OUT}",
            str(PROTO_DIR / "agenttx.proto"),
        ]
    )
    if code != 0:
        print("protoc failed", file=sys.stderr)
        return int(code)
    stub = OUT / "agenttx_pb2_grpc.py"
    stub.write_text(
        stub.read_text().replace(
            "import agenttx_pb2 as agenttx__pb2",
            "from agenttx.wire import agenttx_pb2 as agenttx__pb2",
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
