"""The anchor file of ``agenttx audit anchor``: every intact chain's head (transaction id, seq,
hash) written outside the store, for ``agenttx audit verify --anchor FILE`` to hold the
chains to later.

A head binds its record and, through ``prev``, every record before it: a chain that still
holds the anchored record at the anchored seq is unchanged up to there, whatever else in the
store was rewritten. So keep the file where whoever can write the store cannot (another
machine, write-once storage, a ticket). It protects the chains up to their anchored heads
only: records appended after the anchor are as safe as the store (``docs/audit.md``).

The file is JSON lines: a header ``{"format": "agenttx-audit-anchor", "version": 1}``, then one
``{"hash", "seq", "tx"}`` object per chain. Reading it is bounded: ``MAX_ANCHOR_BYTES`` in all,
``MAX_LINE_BYTES`` a line, each entry checked, a transaction named twice refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from agenttx.audit import AuditRecord, AuditVerification, ChainHead, canonical, check_end

FORMAT = "agenttx-audit-anchor"
VERSION = 1
MAX_ANCHOR_BYTES = 256 << 20  # about two million chains
MAX_LINE_BYTES = 1024  # a line holds an id of at most 128 bytes, a seq and a 64-digit hash
_HASH = re.compile(r"[0-9a-f]{64}")


class AnchorFileError(ValueError):
    """The anchor file cannot be used: the message names the line and what is wrong."""


def header() -> str:
    return canonical({"format": FORMAT, "version": VERSION})


def anchor_lines(verifications: Iterable[AuditVerification]) -> Iterator[str]:
    """One line per intact chain of ``verifications`` (a bad one is not anchored: an anchor
    would vouch for its damage)."""
    for v in verifications:
        if v.ok:
            yield canonical({"tx": v.transaction_id, "seq": v.records, "hash": v.head_hash})


def read_anchor(path: Path) -> dict[str, ChainHead]:
    """The heads the anchor file at ``path`` holds, by transaction id. Raises
    ``AnchorFileError`` (``OSError`` passes through)."""
    heads: dict[str, ChainHead] = {}
    total = 0
    with path.open("rb") as f:
        number = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            number += 1
            total += len(raw)
            if total > MAX_ANCHOR_BYTES:
                raise AnchorFileError(f"{path}: over the limit of {MAX_ANCHOR_BYTES} bytes")
            if len(raw) > MAX_LINE_BYTES:
                raise AnchorFileError(
                    f"{path} line {number}: over the limit of {MAX_LINE_BYTES} bytes"
                )
            try:
                entry = json.loads(raw)
            except ValueError:
                raise AnchorFileError(f"{path} line {number}: not a JSON object") from None
            if number == 1:
                if entry != {"format": FORMAT, "version": VERSION}:
                    raise AnchorFileError(
                        f"{path}: not an anchor file (its first line is not the header "
                        "`agenttx audit anchor` writes)"
                    )
                continue
            tx, head = _entry(entry, path, number)
            if tx in heads:
                raise AnchorFileError(f"{path} line {number}: transaction {tx} is anchored twice")
            heads[tx] = head
    if number == 0:
        raise AnchorFileError(f"{path}: empty (write it with `agenttx audit anchor`)")
    return heads


def _entry(entry: object, path: Path, number: int) -> tuple[str, ChainHead]:
    where = f"{path} line {number}"
    if not isinstance(entry, dict) or set(entry) != {"tx", "seq", "hash"}:
        raise AnchorFileError(f"{where}: an entry is an object of tx, seq and hash")
    tx, seq, digest = entry["tx"], entry["seq"], entry["hash"]
    if not isinstance(tx, str) or not tx or len(tx.encode("utf-8", "surrogatepass")) > 128:
        raise AnchorFileError(f"{where}: tx must be a transaction id of 1..128 bytes")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise AnchorFileError(f"{where}: seq must be a record number of 1 or more")
    if not isinstance(digest, str) or not _HASH.fullmatch(digest):
        raise AnchorFileError(f"{where}: hash must be 64 lowercase hex digits")
    return tx, ChainHead(seq, digest)


def hold(
    v: AuditVerification,
    at_seq: AuditRecord | None,
    heads: dict[str, ChainHead],
    source: str,
) -> AuditVerification:
    """``v`` held to its anchored head, if the file anchors its chain (``check_end``)."""
    head = heads.get(v.transaction_id)
    return v if head is None else check_end(v, at_seq, head, source)


__all__ = [
    "MAX_ANCHOR_BYTES",
    "MAX_LINE_BYTES",
    "AnchorFileError",
    "anchor_lines",
    "header",
    "hold",
    "read_anchor",
]
