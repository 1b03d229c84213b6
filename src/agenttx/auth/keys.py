"""API keys: the key file ``agenttx serve --api-keys FILE`` reads, and resolving a presented
secret to its ``Caller``.

The file is TOML, one ``[[key]]`` table per key::

    [[key]]
    hash = "sha256:<64 hex digits: SHA-256 of the secret's UTF-8 bytes>"
    principal = "alice"
    tenant = "acme"
    roles = ["agent"]            # agent, approver, admin
    note = "laptop, 2026-12"     # optional, free text

Only the hash is stored, so the file is not a secret itself (keep it writable by the operator
only: whoever can edit it can add a key). A secret is ``atx_`` + 43 URL-safe characters (256
random bits): a fast hash is enough for such a secret, so resolving costs one SHA-256 per call.
The entries are bucketed by the first two bytes of their digest; a presented key's digest is
compared with every entry of its bucket (usually none or one) by ``hmac.compare_digest``, with
no early exit, so the cost does not grow with the number of keys and the time tells at most
whether an attacker's own digest shares two bytes with a stored one, which leads to no secret.
No message, log line or repr ever holds a secret.

``KeyRing.reload`` (on SIGHUP) reads the file again; a file that no longer parses is refused
whole, the keys in force stay, and the error is logged. So is a file that parses but holds
no key (empty, only comments, or truncated to nothing by an editor or a copy in progress):
taking it would lock every caller out, the operator included, with no way back short of a
restart; revoking every key is done by stopping the server. A reload also reaches what is already
open: a stream (gRPC ``WatchTransaction``, the HTTP event streams) holds the ``KeyGrant`` it
was opened with and awaits ``KeyGrant.revoked`` beside its next event. Each reload that loads
counts one generation and wakes every such waiter (one ``asyncio.Event`` per reload, replaced
by the next); a grant remembers its generation, so a reload between resolving the key and
the first wait is not missed. A grant whose key is gone then raises ``Unauthenticated``, and
one whose key now resolves to another caller (tenant, principal or roles changed) hands the
new caller to the stream, which checks again what it may show. A key the reload left as it
was keeps its streams untouched.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import tomllib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from agenttx.errors import InvalidArgument, Unauthenticated
from agenttx.files import read_capped
from agenttx.types import Caller, check_principal, check_tenant, parse_roles

log = logging.getLogger("agenttx.auth")

SECRET_PREFIX = "atx_"
HASH_PREFIX = "sha256:"
MAX_KEY_FILE_BYTES = 1 << 20  # ~4000 keys; a larger file is a mistake, not a key file
MAX_SECRET_BYTES = 512  # a presented key longer than this is refused before it is hashed
_FIELDS = frozenset({"hash", "principal", "tenant", "roles", "note"})
_HOW_TO = "create one with `agenttx keys new --principal P --tenant T --role agent`"


def new_secret() -> str:
    """A fresh API key: ``atx_`` and 256 random bits."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    """What the key file stores for ``secret``: ``sha256:<hex>``."""
    return HASH_PREFIX + hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def key_entry_toml(secret: str, principal: str, tenant: str, roles: Sequence[str]) -> str:
    """The ``[[key]]`` table to add to the key file for ``secret``."""
    caller = Caller(check_principal(principal), check_tenant(tenant), parse_roles(list(roles)))
    names = ", ".join(f'"{r}"' for r in sorted(caller.roles))
    return (
        "[[key]]\n"
        f'hash = "{hash_secret(secret)}"\n'
        f"principal = {_toml_string(caller.principal)}\n"
        f'tenant = "{caller.tenant}"\n'
        f"roles = [{names}]\n"
    )


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


@dataclass(frozen=True, slots=True)
class KeyEntry:
    digest: bytes  # SHA-256 of the secret (32 bytes)
    caller: Caller


# What a key whose stream a reload ended must do; said in the error the stream ends with.
_REVOKED = (
    "the API key this stream was opened with was revoked (a reload of the key file removed "
    "it); open the stream again with a key in force"
)


def parse_key_file(text: str, source: str) -> tuple[KeyEntry, ...]:
    """The entries of a key file's text; ``InvalidArgument`` naming ``source`` and the entry."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"{source}: not valid TOML: {exc}") from exc
    extra = sorted(set(doc) - {"key"})
    if extra:
        raise InvalidArgument(f"{source}: unknown top-level entry {extra[0]!r}; use [[key]] tables")
    tables = doc.get("key", [])
    if not isinstance(tables, list):
        raise InvalidArgument(f"{source}: `key` must be a list of [[key]] tables")
    entries: list[KeyEntry] = []
    seen: set[bytes] = set()
    for number, table in enumerate(tables, 1):
        where = f"{source}: key {number}"
        entry = _entry(table, where)
        if entry.digest in seen:
            raise InvalidArgument(f"{where}: the same hash as an earlier key; remove one")
        seen.add(entry.digest)
        entries.append(entry)
    return tuple(entries)


def _entry(table: Any, where: str) -> KeyEntry:
    if not isinstance(table, dict):
        raise InvalidArgument(f"{where}: must be a [[key]] table")
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise InvalidArgument(f"{where}: unknown field {unknown[0]!r}; use {sorted(_FIELDS)}")
    for name in ("hash", "principal", "tenant", "roles"):
        if name not in table:
            raise InvalidArgument(f"{where}: missing `{name}`")
    digest = table["hash"]
    if not isinstance(digest, str) or not digest.startswith(HASH_PREFIX):
        raise InvalidArgument(f'{where}: hash must be "sha256:<64 hex digits>"; {_HOW_TO}')
    try:
        raw = bytes.fromhex(digest.removeprefix(HASH_PREFIX))
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise InvalidArgument(f'{where}: hash must be "sha256:<64 hex digits>"; {_HOW_TO}')
    for name in ("principal", "tenant"):
        if not isinstance(table[name], str):
            raise InvalidArgument(f"{where}: {name} must be a string")
    try:
        caller = Caller(
            check_principal(table["principal"]),
            check_tenant(table["tenant"]),
            parse_roles(table["roles"]),
        )
    except InvalidArgument as exc:
        raise InvalidArgument(f"{where}: {exc.message}") from exc
    return KeyEntry(raw, caller)


def read_key_file(path: Path) -> tuple[KeyEntry, ...]:
    try:
        data = read_capped(path, MAX_KEY_FILE_BYTES)
    except OSError as exc:
        raise InvalidArgument(f"--api-keys {path}: cannot read: {exc.strerror or exc}") from exc
    if data is None:
        raise InvalidArgument(
            f"--api-keys {path}: over {MAX_KEY_FILE_BYTES} bytes; a key file holds [[key]] "
            "tables only (about 250 bytes each)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"--api-keys {path}: not UTF-8 text") from exc
    return parse_key_file(text, f"--api-keys {path}")


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (scheme case-insensitive)."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class KeyRing:
    """The keys in force: resolves a presented secret to its ``Caller``."""

    def __init__(self, entries: Iterable[KeyEntry], path: Path | None = None) -> None:
        self.path = path  # the key file, iff loaded from one (``reload`` reads it again)
        # digest[:2] → the entries with that prefix; replaced whole on reload (one
        # assignment, so a call resolving meanwhile sees the old ring or the new one).
        self._buckets = _buckets(entries)
        # Reloads that loaded so far; a grant remembers the one it was made under, so a reload
        # between the grant and its first wait is not missed.
        self.generation = 0
        # Set by the next reload that loads, then replaced: whoever awaits it (an open
        # stream's grant) wakes once per reload and looks its key up again. Reloads and
        # waiters run on the server's event loop (SIGHUP is a loop signal handler), so the
        # generation and the event change together, between two awaits.
        self._reloaded = asyncio.Event()

    @classmethod
    def from_file(cls, path: Path) -> KeyRing:
        return cls(read_key_file(path), path)

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets.values())

    def reload(self) -> bool:
        """Read the key file again; False (old keys kept, error logged) if it does not load.
        Runs on the event loop of the streams it may end, since it wakes their waiters."""
        return self._apply(self._read())

    async def reload_in_thread(self) -> bool:
        """``reload``, the file read and parsed on a worker thread (a key file at its 1 MiB
        limit is ~0.3 s of CPU); the new keys take effect, and waiters wake, on the loop.
        What ``agenttx serve`` runs on SIGHUP."""
        return self._apply(await asyncio.to_thread(self._read))

    def _read(self) -> list[KeyEntry] | None:
        if self.path is None:
            return None
        try:
            entries = list(read_key_file(self.path))
        except InvalidArgument as exc:
            log.error("keys not reloaded, the %d in force stay: %s", len(self), exc.message)
            return None
        if not entries:
            log.error(
                "keys not reloaded, the %d in force stay: --api-keys %s holds no key (empty "
                "or truncated?); a reload never takes a file without keys, since it would "
                "refuse every caller: write the [[key]] tables back and send SIGHUP again",
                len(self),
                self.path,
            )
            return None
        return entries

    def _apply(self, entries: list[KeyEntry] | None) -> bool:
        if entries is None:
            return False
        self._buckets = _buckets(entries)
        self.generation += 1
        reloaded, self._reloaded = self._reloaded, asyncio.Event()
        reloaded.set()
        log.info("keys reloaded from %s: %d keys", self.path, len(entries))
        return True

    def resolve(self, secret: str | None) -> Caller:
        """The caller of ``secret``; ``Unauthenticated`` for none or an unknown one."""
        return self.grant(secret).caller

    def grant(self, secret: str | None) -> KeyGrant:
        """What ``secret`` is granted now, for a call that stays open (a stream) and must end
        when a reload revokes the key; ``Unauthenticated`` for none or an unknown one."""
        if secret is None:
            raise Unauthenticated(f"no API key: send `authorization: Bearer <key>`; {_HOW_TO}")
        data = secret.encode("utf-8", "surrogatepass")
        if len(data) > MAX_SECRET_BYTES:
            raise Unauthenticated(f"API key over {MAX_SECRET_BYTES} bytes: not a key of ours")
        digest = hashlib.sha256(data).digest()
        found = self._lookup(digest)
        if found is None:
            raise Unauthenticated("unknown API key (revoked, mistyped, or for another server)")
        return KeyGrant(self, digest, found, self.generation)

    def _lookup(self, digest: bytes) -> Caller | None:
        found: Caller | None = None
        for entry in self._buckets.get(digest[:2], ()):  # the whole bucket: no early exit
            if hmac.compare_digest(entry.digest, digest):
                found = entry.caller
        return found

    async def reloaded_since(self, generation: int) -> None:
        """Return once the key file has been reloaded after ``generation`` (at once if it was
        already; a reload that failed does not count)."""
        if self.generation == generation:
            await self._reloaded.wait()


@dataclass(frozen=True, slots=True)
class KeyGrant:
    """A presented key, resolved: the caller it was granted and the ring that may revoke it.
    Holds the key's digest, never the secret."""

    ring: KeyRing = field(repr=False)
    digest: bytes = field(repr=False)  # SHA-256 of the presented secret
    caller: Caller  # what the key resolved to under ``generation``
    generation: int  # the ring's reloads when ``caller`` was looked up

    async def revoked(self) -> KeyGrant:
        """Wait until a reload (since this grant's generation) changes what this key resolves
        to: the grant as it is now (its tenant, principal or roles changed), or
        ``Unauthenticated`` once the key is gone. Reloads that leave the key as it was are
        waited through."""
        generation = self.generation
        while True:
            await self.ring.reloaded_since(generation)
            generation = self.ring.generation
            now = self.ring._lookup(self.digest)
            if now is None:
                raise Unauthenticated(_REVOKED)
            if now != self.caller:
                return KeyGrant(self.ring, self.digest, now, generation)

    async def hold(self, recheck: Callable[[Caller], Awaitable[None]]) -> NoReturn:
        """Run for as long as a stream may: each change of the key's caller is passed to
        ``recheck`` (which raises to end the stream, e.g. ``PermissionDenied``); a revoked key
        raises ``Unauthenticated``. Never returns."""
        grant = self
        while True:
            grant = await grant.revoked()
            await recheck(grant.caller)


def _buckets(entries: Iterable[KeyEntry]) -> dict[bytes, tuple[KeyEntry, ...]]:
    grouped: dict[bytes, list[KeyEntry]] = {}
    for entry in entries:
        grouped.setdefault(entry.digest[:2], []).append(entry)
    return {prefix: tuple(group) for prefix, group in grouped.items()}
