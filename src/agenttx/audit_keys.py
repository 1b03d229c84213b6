"""The audit key file ``--audit-key FILE`` names: the secret keys audit records are keyed with.

The file is TOML: one ``[[key]]`` table per key, and ``sign``, the id new records are keyed
with (it may be left out when the file holds one key)::

    sign = "2026-12"

    [[key]]
    id = "2026-12"
    secret = "<64 to 256 hex digits: 32 to 128 random bytes>"

    [[key]]
    id = "2026-06"          # retired: kept so records keyed with it still verify
    secret = "…"

Unlike the API key file, this one holds the secrets themselves, so it must be the operator's
alone: on POSIX a file that its group or others may read is refused. Keep it apart from the
store (another volume, a secret manager's mount): whoever holds both can forge a chain. The
secret never reaches a message, a log line or a repr (``AuditKey``); an error names the file
and the entry. ``new_key_toml`` writes a fresh ``[[key]]`` table (``agenttx audit new-key``).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
import tomllib
from pathlib import Path
from typing import Any

from agenttx.audit import AuditKey, AuditKeys
from agenttx.errors import InvalidArgument
from agenttx.files import read_capped_with_mode
from agenttx.plural import named

MAX_FILE_BYTES = 64 << 10  # 64 KiB: room for 64 keys and their comments
MAX_KEYS = 64
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SECRET = re.compile(r"(?:[0-9a-fA-F]{2}){32,128}")
_FIELDS = frozenset({"id", "secret"})
_HOW_TO = "`agenttx audit new-key` prints a [[key]] table with a fresh secret"


def new_key_toml(key_id: str = "") -> str:
    """A ``[[key]]`` table with a fresh 256-bit secret; ``key_id`` defaults to today's date
    and time (UTC), which sorts the keys of a rotation."""
    key_id = key_id or time.strftime("%Y-%m-%dT%H%MZ", time.gmtime())
    _check_id(key_id, "the key id")
    return f'[[key]]\nid = "{key_id}"\nsecret = "{secrets.token_hex(32)}"\n'


def parse_audit_keys(text: str, source: str) -> AuditKeys:
    """The key ring a key file's text holds; ``InvalidArgument`` naming ``source`` and the
    entry (never the secret)."""
    try:
        doc: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"{source}: not valid TOML: {exc}") from exc
    extra = sorted(set(doc) - {"key", "sign"})
    if extra:
        raise InvalidArgument(f"{source}: {named('unknown setting', extra)}; it holds sign "
                              "and [[key]] tables of id and secret")  # fmt: skip
    entries = doc.get("key", [])
    if not isinstance(entries, list) or not entries:
        raise InvalidArgument(f"{source}: holds no [[key]] table; {_HOW_TO}")
    if len(entries) > MAX_KEYS:
        raise InvalidArgument(f"{source}: {len(entries)} keys, over the limit of {MAX_KEYS}; "
                              "drop keys whose records audit retention has deleted")  # fmt: skip
    keys: dict[str, AuditKey] = {}
    for number, entry in enumerate(entries, 1):
        where = f"{source} key {number}"
        if not isinstance(entry, dict) or set(entry) != _FIELDS:
            raise InvalidArgument(f"{where}: a [[key]] table holds id and secret, nothing else")
        key_id = _check_id(entry["id"], f"{where}: id")
        secret = entry["secret"]
        if not isinstance(secret, str) or not _SECRET.fullmatch(secret):
            raise InvalidArgument(
                f"{where} ({key_id!r}): secret must be 64 to 256 hex digits (32 to 128 random "
                f"bytes); {_HOW_TO}"
            )
        if key_id in keys:
            raise InvalidArgument(f"{where}: id {key_id!r} is given twice")
        keys[key_id] = AuditKey(key_id, bytes.fromhex(secret))
    sign = doc.get("sign")
    if sign is None:
        if len(keys) > 1:
            raise InvalidArgument(
                f"{source}: {len(keys)} keys and no `sign`: name the key new records are keyed "
                f'with (sign = "{next(iter(keys))}")'
            )
        sign = next(iter(keys))
    if not isinstance(sign, str) or sign not in keys:
        raise InvalidArgument(f"{source}: sign = {sign!r} names no [[key]] of the file")
    return AuditKeys(keys, sign)


def read_audit_keys(path: Path) -> AuditKeys:
    """The key ring of the file at ``path``: refused (``InvalidArgument``) if it cannot be read,
    is too large, not UTF-8, readable by its group or others (POSIX), or does not parse."""
    source = f"--audit-key {path}"
    try:
        data, mode = read_capped_with_mode(path, MAX_FILE_BYTES)
    except OSError as exc:
        raise InvalidArgument(f"{source}: cannot read: {exc.strerror or exc}") from exc
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidArgument(
            f"{source}: its group or others may read it (mode {stat.S_IMODE(mode):04o}); it "
            f"holds the secrets that key the audit chain: chmod 600 {path}"
        )
    if data is None:
        raise InvalidArgument(f"{source}: over {MAX_FILE_BYTES} bytes; it holds [[key]] tables")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{source}: not UTF-8 text") from exc
    return parse_audit_keys(text, source)


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidArgument(
            f"{what} must be 1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or digit"
        )
    return value


__all__ = ["MAX_FILE_BYTES", "MAX_KEYS", "new_key_toml", "parse_audit_keys", "read_audit_keys"]
