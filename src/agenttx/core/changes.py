"""The change set a commit would make, read from a transaction's image, and its hash.

What a commit does, exactly: publish the write set (each key's newest committed value is its
``before``), keep the files the steps wrote (their undo is discarded), release the staged
effects, and discard every pending undo action; the irreversible steps that ran are listed
too, since no rollback can take them back.

``change_hash`` is the SHA-256 of the canonical JSON of the change set's **identity**: per
key the SHA-256 of the before and after texts, per file its before and after SHA-256, per
effect its step, channel, idempotency key and payload SHA-256, per irreversible step its
tool and arguments' SHA-256, per undo its handler and idempotency key. So the same change
gives the same hash whatever the display limits left out, and any difference — a value, a
file edited outside, another transaction committing one of the keys — gives another.

Building the display values and hashing are CPU work proportional to the change; past a
size the work runs on a worker thread (``offload.by_size``) so the event loop is not held.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agenttx.audit import canonical
from agenttx.core.offload import by_size
from agenttx.core.runtime import TxRuntime
from agenttx.receipts import (
    ChangeSet,
    EffectChange,
    FileChange,
    IrreversibleStep,
    StateChange,
    UndoAction,
)
from agenttx.store.contract import Store
from agenttx.tools.builtin.fs import RESTORE_HANDLER
from agenttx.types import EffectClass

# A state value longer than this (UTF-8 JSON) is shown by its size and hash, not in full.
MAX_PREVIEW_VALUE_BYTES = 4 << 10
# Past this many bytes of shown values, the remaining keys are listed by hash only: a preview
# fits a reply (gRPC's 4 MiB) whatever the transaction wrote.
MAX_PREVIEW_VALUES_BYTES = 1 << 20
# A staged effect's payload shown in its summary, in characters.
EFFECT_SUMMARY_CHARS = 200
# Files larger than this (either side) get no unified diff, only their hashes.
MAX_DIFF_INPUT_BYTES = 256 << 10
# The diff text itself is cut here.
MAX_DIFF_BYTES = 64 << 10
# Above this many state keys the display and hash are built on a worker thread (1,024 keys
# take about 1.5 ms of CPU: inline they cost less than the thread hop).
INLINE_KEYS = 1024


def _sha(text: str | None) -> str:
    if text is None:
        return ""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


async def build_change_set(rt: TxRuntime, store: Store, fs_root: Path) -> tuple[ChangeSet, str]:
    """The change set the commit of ``rt`` would make, and its hash. Reads the keys' committed
    values (one batch read) and the files' current bytes (on a worker thread)."""
    writes = rt.final_writes()
    keys = sorted(writes)
    befores = await store.read_states(rt.row.tenant, keys) if keys else {}
    pending_undo = [u for u in rt.undo if u.status == "pending"]
    file_undo = [u for u in pending_undo if u.handler == RESTORE_HANDLER]
    files = (
        await asyncio.to_thread(_files, fs_root, [u.args_json for u in file_undo])
        if (file_undo)
        else []
    )
    state_rows = [(k, befores.get(k, (None, 0))[0], writes[k]) for k in keys]
    state, elided, state_ids = await by_size(len(keys), INLINE_KEYS, _state, state_rows)
    effects = [
        EffectChange(
            step_id=e.step_id,
            channel=e.channel,
            idempotency_key=e.idempotency_key,
            payload_bytes=len(e.payload_json.encode("utf-8", "surrogatepass")),
            payload_sha256=_sha(e.payload_json),
            summary=_summary(e.payload_json),
        )
        for e in rt.staged
    ]
    irreversible = [
        IrreversibleStep(st.step_id, st.tool, _sha(st.arguments_json))
        for st in sorted(rt.steps.values(), key=lambda st: st.step_id)
        if st.effect == EffectClass.IRREVERSIBLE.value
    ]
    undo = [UndoAction(u.step_id, u.handler, u.idempotency_key) for u in pending_undo]
    changes = ChangeSet(state, files, effects, irreversible, undo, elided)
    identity = {
        "state": state_ids,
        "files": [[f.path, f.before_sha256, f.after_sha256] for f in files],
        "effects": [[e.step_id, e.channel, e.idempotency_key, e.payload_sha256] for e in effects],
        "irreversible": [[s.step_id, s.tool, s.arguments_sha256] for s in irreversible],
        "undo": [[u.step_id, u.handler, u.idempotency_key] for u in undo],
    }
    change_hash = await by_size(len(keys), INLINE_KEYS, _digest, identity)
    return changes, change_hash


def _digest(identity: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(identity).encode("utf-8", "surrogatepass")).hexdigest()


def _state(
    rows: Sequence[tuple[str, str | None, str | None]],
) -> tuple[list[StateChange], int, list[list[str]]]:
    """Display entries, how many had their values left out for size, and the hash identity.
    The values shown are parsed in one ``json.loads`` of them all (one C call, not one per
    value: this is the preview's hot loop)."""
    ids: list[list[str]] = []
    shown: list[str] = []  # JSON texts to parse, in order
    plan: list[tuple[str, str, str, Any, Any]] = []  # key, shas, and each side's display
    budget = MAX_PREVIEW_VALUES_BYTES
    elided = 0
    sha = _sha
    for key, before, after in rows:
        b_sha, a_sha = sha(before), sha(after)
        ids.append([key, b_sha, a_sha])
        # Characters first (a UTF-8 character is 1-4 bytes, so a text this long in characters
        # is too long in bytes), then the bytes of what is left.
        size = len(before or "") + len(after or "")
        if size <= budget:
            size = _utf8_len(before) + _utf8_len(after)
        if size > budget:
            elided += 1
            plan.append((key, b_sha, a_sha, _elided(before, b_sha), _elided(after, a_sha)))
            continue
        budget -= size
        plan.append(
            (key, b_sha, a_sha, _display(before, b_sha, shown), _display(after, a_sha, shown))
        )
    values = json.loads("[" + ",".join(shown) + "]") if shown else []
    out = [
        StateChange(
            key,
            values[b] if type(b) is int else b,
            values[a] if type(a) is int else a,
            b_sha,
            a_sha,
        )
        for key, b_sha, a_sha, b, a in plan
    ]
    return out, elided, ids


def _display(text: str | None, sha: str, shown: list[str]) -> Any:
    """None, an elided summary, or the index of ``text`` among the texts to parse."""
    if text is None:
        return None
    if len(text) > MAX_PREVIEW_VALUE_BYTES or _utf8_len(text) > MAX_PREVIEW_VALUE_BYTES:
        return _elided(text, sha)
    shown.append(text)
    return len(shown) - 1


def _utf8_len(text: str | None) -> int:
    """The UTF-8 size of a stored JSON text (0 for an absent value)."""
    if not text:
        return 0
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _elided(text: str | None, sha: str = "") -> Any:
    if text is None:
        return None
    return {
        "elided": True,
        "bytes": _utf8_len(text),
        "sha256": sha or _sha(text),
    }


def _summary(payload_json: str) -> str:
    if len(payload_json) <= EFFECT_SUMMARY_CHARS:
        return payload_json
    return payload_json[:EFFECT_SUMMARY_CHARS] + f"… ({len(payload_json)} characters)"


def _files(root: Path, undo_args: Sequence[str]) -> list[FileChange]:
    """Per path the first write's prior bytes (the state before the transaction) against the
    bytes on disk now (after its last write), with a unified diff for text."""
    first: dict[str, bytes | None] = {}
    for args_json in undo_args:  # oldest first: the first undo of a path holds its original
        args = json.loads(args_json)
        path = str(args.get("path", ""))
        if path and path not in first:
            prior = args.get("prior_hex")
            first[path] = bytes.fromhex(prior) if isinstance(prior, str) else None
    out: list[FileChange] = []
    resolved_root = root.resolve()
    for path, before in first.items():
        target = Path(path)
        try:
            after: bytes | None = target.read_bytes()
        except FileNotFoundError:
            after = None
        try:
            shown = str(target.resolve().relative_to(resolved_root))
        except ValueError:
            shown = path
        diff, note = _diff(shown, before, after)
        out.append(
            FileChange(
                path=shown,
                before_sha256=hashlib.sha256(before).hexdigest() if before is not None else "",
                after_sha256=hashlib.sha256(after).hexdigest() if after is not None else "",
                diff=diff,
                note=note,
            )
        )
    return sorted(out, key=lambda f: f.path)


def _diff(path: str, before: bytes | None, after: bytes | None) -> tuple[str, str]:
    if len(before or b"") > MAX_DIFF_INPUT_BYTES or len(after or b"") > MAX_DIFF_INPUT_BYTES:
        return "", f"no diff: a side is over {MAX_DIFF_INPUT_BYTES} bytes"
    try:
        old = (before or b"").decode("utf-8")
        new = (after or b"").decode("utf-8")
    except UnicodeDecodeError:
        return "", "no diff: binary content"
    text = "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile="/dev/null" if before is None else f"a/{path}",
            tofile="/dev/null" if after is None else f"b/{path}",
        )
    )
    if _utf8_len(text) > MAX_DIFF_BYTES:
        cut = text.encode("utf-8", "surrogatepass")[:MAX_DIFF_BYTES]
        return cut.decode("utf-8", "ignore"), f"diff cut at {MAX_DIFF_BYTES} bytes"
    return text, ""
