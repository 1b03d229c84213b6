"""``fs.write`` and ``fs.read`` inside a sandbox root.

A path is relative, made of plain names only (no ``..``, ``.``, empty or absolute parts), and
may not pass through a symlink that leaves the root, nor name a symlink. ``fs.write`` records
the prior bytes as its undo *before* touching the file, then writes atomically (temporary file
and rename), so a crash at any point leaves either the old or the new file and a durable way
back to the old one.

Temporary files: each write goes through a name of its own, ``.<name>.<16 hex>.agenttx-tmp``
beside the target, created exclusively (``O_EXCL``), so it can never overwrite a file that is
there. Names of that shape are reserved: ``fs.write`` refuses them as targets, so a user file
never has one. The undo record names the write's temporary file, and the undo removes exactly
that name — never a file it did not make. A write that fails (a full disk) removes its own
temporary file before it reports the failure.

Files are looked at before they are read: ``fs.read`` refuses a file larger than
``MAX_FILE_BYTES`` (its contents could not fit in a step reply) or one that is not a regular
file (a FIFO would block forever) without reading it, and ``fs.write`` refuses to overwrite a
file too large to keep as its undo. All file work runs on a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any, TypedDict

from agenttx.errors import SandboxError as SandboxError  # re-exported: its old home
from agenttx.tools.builtin.args import as_object, required_str
from agenttx.tools.context import ToolContext
from agenttx.tools.contract import tool

TMP_SUFFIX = ".agenttx-tmp"
RESTORE_HANDLER = "fs.restore_file"

# The largest file fs.read returns and fs.write keeps as its undo: a step's reply is at most
# 4 MiB, of which 64 KiB are its frame (``agenttx.core.limits``); a larger file can never be
# delivered, so it is refused before a byte of it is read.
MAX_FILE_BYTES = (4 << 20) - (64 << 10)

# ``.<name>.<16 hex>.agenttx-tmp``: the shape of every temporary file fs.write makes.
_TEMP_NAME = re.compile(r"\..*\.[0-9a-f]{16}" + re.escape(TMP_SUFFIX), re.DOTALL)
# A temporary name keeps at most this much of the target's name, so it stays under the
# file system's name limit (255 bytes) whatever the target's length.
_TEMP_STEM_CHARS = 64


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


def is_temp_name(name: str) -> bool:
    """True iff ``name`` has the shape of fs.write's temporary files (reserved)."""
    return _TEMP_NAME.fullmatch(name) is not None


def temp_path(target: Path) -> Path:
    """A fresh temporary name beside ``target`` (64 random bits: no two writes share one)."""
    stem = target.name[:_TEMP_STEM_CHARS]
    return target.with_name(f".{stem}.{secrets.token_hex(8)}{TMP_SUFFIX}")


def _os_error(exc: OSError, path: str) -> OSError:
    if exc.errno == errno.ENOSPC:
        # Said as what it is (the hint names a full disk), whatever call ran out of room.
        return OSError(errno.ENOSPC, f"No space left on device (disk full) writing '{path}'")
    return type(exc)(f"{exc.strerror or exc}: '{path}'")


def _write_through(tmp: Path, target: Path, data: bytes, *, exclusive: bool) -> None:
    """Write ``data`` to ``tmp`` and rename it over ``target``. ``exclusive``: ``tmp`` must not
    exist (a forward write's fresh name); otherwise it is this undo's own reserved name,
    perhaps left half-written by a crash. On any failure ``tmp`` is removed: nothing is left
    behind, and the target is untouched (the rename is the only change to it)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    if exclusive:
        flags |= os.O_EXCL
    fd = os.open(tmp, flags, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(target: Path, data: bytes) -> None:
    """Replace ``target``'s contents with ``data`` through a fresh temporary file."""
    _write_through(temp_path(target), target, data, exclusive=True)


def _under_a_file(root: Path, target: Path, path: str) -> OSError | None:
    """The error for a target whose parent path runs through a file, or None."""
    prefix = root.resolve()
    for i, name in enumerate(target.relative_to(prefix).parts[:-1]):
        prefix = prefix / name
        if prefix.exists() and not prefix.is_dir():
            shown = "/".join(path.split("/")[: i + 1])
            return NotADirectoryError(
                errno.ENOTDIR, f"Not a directory: '{shown}' is a file, so '{path}' cannot be made"
            )
    return None


def _read_prior(target: Path, path: str, why: str) -> bytes | None:
    """The bytes ``target`` holds now (None if it does not exist), checked before reading;
    ``why`` says what the limit is for, in the error of a file over it. Errors name ``path``."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _os_error(exc, path) from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"Is a directory: '{path}'")
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file: '{path}'")
        if info.st_size > MAX_FILE_BYTES:
            raise OSError(
                errno.EFBIG,
                f"file '{path}' is {info.st_size} bytes, over the {MAX_FILE_BYTES}-byte limit "
                f"{why}",
            )
        try:
            data = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise _os_error(exc, path) from None
    if len(data) > MAX_FILE_BYTES:  # it grew since fstat
        raise OSError(errno.EFBIG, f"file '{path}' is over the {MAX_FILE_BYTES}-byte limit {why}")
    return data


def _prepare_write(root: Path, path: str) -> tuple[Path, bytes | None, Path]:
    """Blocking part of fs.write before its undo is recorded: the target, its prior bytes and
    a temporary name that does not exist."""
    root.mkdir(parents=True, exist_ok=True)
    target = sandbox_path(root, path)
    if is_temp_name(target.name):
        raise SandboxError(
            f"path '{path}' has the reserved shape of fs.write's temporary files "
            f"(.<name>.<16 hex>{TMP_SUFFIX}); choose another name"
        )
    under = _under_a_file(root, target, path)
    if under is not None:
        raise under
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _os_error(exc, path) from None
    prior = _read_prior(target, path, "fs.write can keep to undo an overwrite; write elsewhere")
    tmp = temp_path(target)
    while tmp.exists():  # 2^-64 per existing file; a name that is taken is never reused
        tmp = temp_path(target)
    return target, prior, tmp


def _finish_write(tmp: Path, target: Path, data: bytes, path: str) -> None:
    try:
        _write_through(tmp, target, data, exclusive=True)
    except OSError as exc:
        raise _os_error(exc, path) from None


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
    dry_run="full_simulation",  # ``fs_write_preview`` says what the write would change
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
    data = contents.encode()
    target, prior, tmp = await asyncio.to_thread(_prepare_write, ctx.fs_root, path)
    # Durable before the file changes: a crash right after still knows how to restore it, and
    # which temporary file is this write's to remove.
    await ctx.register_undo(
        {
            "path": str(target),
            "prior_hex": prior.hex() if prior is not None else None,
            "tmp": tmp.name,
        },
        handler=RESTORE_HANDLER,
    )
    await asyncio.to_thread(_finish_write, tmp, target, data, path)
    return {"path": path, "bytes": len(data)}


class FileWritePreview(TypedDict):
    """What a dry run of ``fs.write`` says: the file's bytes before and after, by SHA-256
    ("" for a file that does not exist), and the bytes it would write."""

    path: str
    bytes: int
    before_sha256: str
    after_sha256: str


@fs_write.simulate
async def fs_write_preview(ctx: ToolContext, arguments: Any) -> FileWritePreview:
    args = as_object(arguments)
    path = required_str(args, "path")
    data = required_str(args, "contents").encode()
    prior = await asyncio.to_thread(_prior_bytes, ctx.fs_root, path)
    return {
        "path": path,
        "bytes": len(data),
        "before_sha256": hashlib.sha256(prior).hexdigest() if prior is not None else "",
        "after_sha256": hashlib.sha256(data).hexdigest(),
    }


def _prior_bytes(root: Path, path: str) -> bytes | None:
    # The checks of a real write (sandbox, a file in the way), reading what is there.
    target = sandbox_path(root, path)
    under = _under_a_file(root, target, path)
    if under is not None:
        raise under
    return _read_prior(target, path, "of fs.write's preview; write a smaller file")


def _restore(target: Path, prior_hex: str | None, tmp: str | None) -> None:
    own_tmp = target.with_name(tmp) if tmp and is_temp_name(tmp) else None
    if prior_hex is None:
        target.unlink(missing_ok=True)
    else:
        prior = bytes.fromhex(prior_hex)
        # The write may never have replaced the file (it failed, e.g. on a full disk, or a
        # crash came first): then there is nothing to write back, and nothing that needs
        # room on a disk that may still be full.
        if not _holds(target, prior):
            target.parent.mkdir(parents=True, exist_ok=True)
            if own_tmp is not None:
                _write_through(own_tmp, target, prior, exclusive=False)
            else:
                atomic_write(target, prior)
    # A crash between writing the temporary file and renaming it leaves it behind; it is this
    # write's own (reserved name, recorded before it existed). Records written before
    # temporary names were unique name none: nothing is removed on a guess.
    if own_tmp is not None:
        own_tmp.unlink(missing_ok=True)


def _holds(target: Path, data: bytes) -> bool:
    try:
        if target.is_symlink() or not target.is_file() or target.stat().st_size != len(data):
            return False
        return target.read_bytes() == data
    except OSError:
        return False


async def restore_file(ctx: Any, path: str, prior_hex: str | None, tmp: str | None = None) -> None:
    """Undo of ``fs.write``: put the prior bytes back, or remove a file that did not exist.
    Idempotent, so running it again after a crash changes nothing."""
    await asyncio.to_thread(_restore, Path(path), prior_hex, tmp)


def _read(root: Path, path: str) -> bytes:
    root.mkdir(parents=True, exist_ok=True)
    target = sandbox_path(root, path)
    under = _under_a_file(root, target, path)
    if under is not None:
        raise under
    data = _read_prior(target, path, "of fs.read (a step reply holds 4 MiB); read a smaller file")
    if data is None:
        raise FileNotFoundError(f"No such file or directory: '{path}'")
    return data


@tool(
    name="fs.read",
    effect="read",
    idempotent=True,
    dry_run="full_simulation",  # reading changes nothing: a dry run reads
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
    data = await asyncio.to_thread(_read, ctx.fs_root, path)
    return {"path": path, "contents": data.decode("utf-8", errors="replace")}
