"""``fs.write`` and ``fs.read`` inside a sandbox root.

A path is relative, made of plain names only (no ``..``, ``.``, empty or absolute parts), and
may not pass through a symlink that leaves the root, nor name a symlink. ``fs.write`` records
the prior bytes as its undo *before* touching the file, then writes atomically (temporary file
and rename), so a crash at any point leaves either the old or the new file and a durable way
back to the old one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypedDict

from agenttx.errors import SandboxError as SandboxError  # re-exported: its old home
from agenttx.tools.builtin.args import as_object, required_str
from agenttx.tools.context import ToolContext
from agenttx.tools.contract import tool

TMP_SUFFIX = ".agenttx-tmp"
RESTORE_HANDLER = "fs.restore_file"


def sandbox_path(root: Path, path: str) -> Path:
    """The absolute target of ``path`` inside ``root``; raises ``SandboxError`` if it escapes."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise SandboxError(f"path '{path}' escapes the sandbox")
    root = root.resolve()
    target = root.joinpath(*parts)
    parent = target.parent.resolve()
    if parent != root and root not in parent.parents:
        raise SandboxError(f"path '{path}' escapes the sandbox")
    if target.is_symlink():
        raise SandboxError(f"path '{path}' escapes the sandbox")
    return parent / target.name


def _os_error(exc: OSError, path: str) -> OSError:
    return type(exc)(f"{exc.strerror or exc}: '{path}'")


def atomic_write(target: Path, data: bytes) -> None:
    tmp = target.with_name(target.name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, target)


class FileWritten(TypedDict):
    """What ``fs.write`` returns: the path as given and the UTF-8 bytes written."""

    path: str
    bytes: int


class FileRead(TypedDict):
    """What ``fs.read`` returns (invalid UTF-8 replaced by U+FFFD)."""

    path: str
    contents: str


@tool(
    name="fs.write",
    effect="compensatable",
    idempotent=True,  # writing the same bytes twice leaves the same file
    description="Write a UTF-8 file in the sandbox; rollback restores the previous bytes.",
    schema={
        "type": "object",
        "properties": {"path": {"type": "string"}, "contents": {"type": "string"}},
        "required": ["path", "contents"],
        "additionalProperties": False,
    },
    examples=[{"path": "drafts/c-1.json", "contents": '{"status":"draft"}'}],
)
async def fs_write(ctx: ToolContext, arguments: Any) -> FileWritten:
    args = as_object(arguments)
    path = required_str(args, "path")
    contents = required_str(args, "contents")
    ctx.fs_root.mkdir(parents=True, exist_ok=True)
    target = sandbox_path(ctx.fs_root, path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        prior = target.read_bytes() if target.exists() else None
    except OSError as exc:
        raise _os_error(exc, path) from None
    # Durable before the file changes: a crash right after still knows how to restore it.
    await ctx.register_undo(
        {"path": str(target), "prior_hex": prior.hex() if prior is not None else None},
        handler=RESTORE_HANDLER,
    )
    data = contents.encode()
    try:
        atomic_write(target, data)
    except OSError as exc:
        raise _os_error(exc, path) from None
    return {"path": path, "bytes": len(data)}


async def restore_file(ctx: Any, path: str, prior_hex: str | None) -> None:
    """Undo of ``fs.write``: put the prior bytes back, or remove a file that did not exist.
    Idempotent, so running it again after a crash changes nothing."""
    target = Path(path)
    if prior_hex is None:
        target.unlink(missing_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, bytes.fromhex(prior_hex))
    # A crash between writing the temporary file and renaming it leaves the temporary behind.
    target.with_name(target.name + TMP_SUFFIX).unlink(missing_ok=True)


@tool(
    name="fs.read",
    effect="read",
    idempotent=True,
    description="Read a UTF-8 file in the sandbox.",
    schema={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    examples=[{"path": "drafts/c-1.json"}],
)
async def fs_read(ctx: ToolContext, arguments: Any) -> FileRead:
    path = required_str(as_object(arguments), "path")
    ctx.fs_root.mkdir(parents=True, exist_ok=True)
    target = sandbox_path(ctx.fs_root, path)
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"No such file or directory: '{path}'") from None
    except OSError as exc:
        raise _os_error(exc, path) from None
    return {"path": path, "contents": data.decode("utf-8", errors="replace")}
