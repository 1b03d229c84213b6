"""The audit chain: one hash-chained record per event of a transaction, and its verification.

Every event of a transaction (its vocabulary is ``AuditKind``) becomes an ``AuditRecord``
whose ``body`` is canonical JSON (sorted keys, compact, UTF-8) of the transaction id, the
record's position ``seq`` (1, 2, 3 … with no gap), its kind, time, the transaction's revision
after the event, the tenant, the event's data and ``prev``: the previous record's hash
(``GENESIS`` for the first). ``hash`` is the SHA-256 of ``body``. So editing a record breaks its
own hash, and removing, inserting or reordering records breaks the next record's ``prev`` or
the run of ``seq`` — which ``verify_chain`` reports, naming the first bad record.

A chain alone cannot tell that its newest records were cut off; ``verify_chain`` takes an
``Anchor`` (what the transaction's row and outbox say happened, or, once retention deleted the
row, the tombstone it left: the chain's final seq and hash) to catch that too. Someone able to
rewrite the whole chain and its anchors in the store can forge it: ``check_end`` holds a chain
against a head kept outside the store (``agenttx audit anchor``'s file, ``docs/audit.md``).

A **keyed** chain (``AuditKeys``, ``--audit-key FILE``) closes that gap for whoever has the
store but not the key: each record's hash is then the HMAC-SHA256 of its body under a secret
key, and the body names the scheme and the key's id (``scheme``, ``key_id``), so the MAC covers
them too and a verifier holding several keys by id checks each record with its own. A plain
record after a keyed one, a chain with no keyed record when the verifier holds a key, and a MAC
that does not match are bad; keyed records the verifier has no key for are *unchecked*, which
is not ok either.

This module imports nothing of AgentTx but ``jsontext``: the stores, the engine, the CLI and
the client all use it.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from json import encoder as _encoder
from typing import Any, NamedTuple

from agenttx.plural import named, plural

GENESIS = ""  # the ``prev`` of a chain's first record
HMAC_SHA256 = "hmac-sha256"  # the keyed scheme: ``hash`` is HMAC-SHA256(secret, body), in hex
# What a verifier without the key (or with the wrong ring) is told to give it.
KEY_HOW_TO = "--audit-key FILE, env AGENTTX_AUDIT_KEY"

_CANONICAL = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True
)
# One C encoder made once, as ``agenttx.jsontext`` does (a record is made on every step, and
# ``JSONEncoder.encode`` costs a new encoder per call); no ``markers``, so it is thread-safe,
# and a value that contains itself hits the recursion limit instead.
_make_c_encoder: Any = getattr(_encoder, "c_make_encoder", None)
_C_CANONICAL = (
    _make_c_encoder(
        None, _CANONICAL.default, _encoder.encode_basestring, None, ":", ",", True, False, False
    )
    if _make_c_encoder is not None
    else None
)
_str = _encoder.encode_basestring  # a JSON string, non-ASCII kept (as the encoder writes it)


class AuditKind(enum.StrEnum):
    """The event vocabulary. A new kind of event is one member here and one call where it
    happens (``docs/audit.md`` lists each kind's data)."""

    BEGIN = "begin"  # the transaction was created (the first record of a chain)
    AUDIT_STARTED = "audit.started"  # first record of a transaction older than the chain
    STEP_STARTED = "step.started"  # an outside step is durable as RUNNING, before its call
    STEP_SUCCEEDED = "step.succeeded"  # a step's result is durable
    STEP_FAILED = "step.failed"  # an attempt failed (its rollback is the next record)
    STEP_OUTCOME_UNKNOWN = "step.outcome_unknown"  # an outside call may or may not have happened
    STEP_RESOLVED = "step.resolved"  # an unknown outcome was settled (happened / not)
    STEP_UNDONE = "step.undone"  # undo_step undid the last live step (its rollback precedes)
    STEP_REDONE = "step.redone"  # redo_step re-applied an undone step's recorded writes
    STEP_CHECKPOINT = "step.checkpoint"  # a running step recorded its provider operation
    ROLLBACK_STARTED = "rollback.started"  # a rewind with compensations to run is durable
    COMPENSATION = "compensation"  # one undo handler ran (done or failed) or was skipped
    # A compensating transaction settled: compensated, or failed with what was not undone.
    COMPENSATION_SETTLED = "compensation.settled"
    ROLLBACK = "rollback"  # a rewind ended: strategy, target, final status
    COMMIT = "commit"  # writes published, effects queued, transaction COMMITTED
    COMMIT_CONFLICT = "commit.conflict"  # validation failed; the abort follows
    DELIVERY = "delivery"  # one delivery attempt of a committed effect
    # Reserved for the rest of issue 13, each added where its event happens:
    PREVIEW = "preview"
    APPROVAL = "approval"
    APPROVAL_REFUSED = "approval.refused"  # an approver refused a receipt, with a reason
    RECONCILE = "reconcile"  # a reconcile handler was asked (started) or answered


FIRST_KINDS = frozenset({AuditKind.BEGIN.value, AuditKind.AUDIT_STARTED.value})


class ChainHead(NamedTuple):
    """The newest record of a chain: where the next one attaches."""

    seq: int  # 0: the chain is empty
    hash: str  # GENESIS when empty


EMPTY = ChainHead(0, GENESIS)


@dataclass(frozen=True, slots=True)
class AuditKey:
    """One secret key a chain's records are keyed with, by its id (the id is in each record;
    the secret never is, nor in any repr or message)."""

    id: str
    secret: bytes = field(repr=False)

    def mac(self, body: str) -> str:
        # ``hmac.digest``: one C call (OpenSSL), not an HMAC object, since every record is made
        # through here while a key is set.
        return hmac.digest(self.secret, body.encode("utf-8", "surrogatepass"), "sha256").hex()


@dataclass(frozen=True, slots=True)
class AuditKeys:
    """A ring of audit keys (``agenttx.audit_keys`` reads one from its file): ``signing``, the
    id new records are keyed with, and every key a verifier may meet, by id (the retired ones
    too, so older records still check after a rotation)."""

    keys: Mapping[str, AuditKey]  # id → key; never empty
    signing: str  # an id of ``keys``

    def __post_init__(self) -> None:
        if self.signing not in self.keys:
            raise ValueError(f"the signing audit key {self.signing!r} is not in the ring")

    @classmethod
    def of(cls, *keys: AuditKey, signing: str = "") -> AuditKeys:
        """A ring of ``keys``; the first signs unless ``signing`` names another."""
        if not keys:
            raise ValueError("an audit key ring needs at least one key")
        return cls({k.id: k for k in keys}, signing or keys[0].id)

    @property
    def signer(self) -> AuditKey:
        return self.keys[self.signing]


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """An event not yet placed in its chain: a store appends it after the chain's head inside
    the write it records (deliveries, which run outside the transaction's lock)."""

    tx_id: str
    kind: str
    at: float
    data: Mapping[str, Any]
    key: AuditKey | None = None  # the key its record is keyed with (None: plain)


class AuditRecord(NamedTuple):
    """One record as stored; ``body`` is the text ``hash`` covers, the rest is read from it.
    (A named tuple, not a dataclass: one is made on every step, and it builds 10x faster.)"""

    tx_id: str
    seq: int
    kind: str
    at: float
    body: str
    hash: str

    @property
    def head(self) -> ChainHead:
        return ChainHead(self.seq, self.hash)

    def content(self) -> dict[str, Any]:
        """The body's fields (``prev``, ``revision``, ``tenant``, ``data`` …) as a dict."""
        value: dict[str, Any] = json.loads(self.body)
        return value

    def line(self) -> str:
        """One JSON line of an export: the body's fields plus ``hash`` (recomputable from the
        rest, so an exported file can be checked with no store)."""
        return canonical({**self.content(), "hash": self.hash})


def canonical(value: Any) -> str:
    """Canonical JSON text: sorted keys, compact, non-ASCII kept, no NaN."""
    if _C_CANONICAL is None or type(value) is not dict:
        return _CANONICAL.encode(value)
    try:
        return "".join(_C_CANONICAL(value, 0))
    except RecursionError:
        raise ValueError("Circular reference detected (or nesting too deep for JSON)") from None


def digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def text_digest(text: str) -> str:
    """The SHA-256 of a stored text (arguments, output) a record binds without copying."""
    return digest(text) if text else ""


def make_record(
    head: ChainHead,
    *,
    tx_id: str,
    tenant: str,
    kind: str,
    at: float,
    revision: int,
    data: Mapping[str, Any],
    key: AuditKey | None = None,
) -> AuditRecord:
    """The record that follows ``head``. Its body is ``canonical`` of its fields; with ``key``
    it is keyed (``record_from_text``)."""
    data_text = canonical(data if type(data) is dict else dict(data))
    return record_from_text(
        head,
        tx_id=tx_id,
        tenant=tenant,
        kind=kind,
        at=at,
        revision=revision,
        data_text=data_text,
        key=key,
    )


def record_from_text(
    head: ChainHead,
    *,
    tx_id: str,
    tenant: str,
    kind: str,
    at: float,
    revision: int,
    data_text: str,
    key: AuditKey | None = None,
) -> AuditRecord:
    """``make_record`` with the data already canonical text (``data_text``): the body is
    written out here field by field, keys in sorted order, because this runs on every step.
    With ``key`` the body also holds ``key_id`` and ``scheme`` and the hash is its HMAC."""
    seq = head.seq + 1
    at = float(at)
    if not math.isfinite(at):
        raise ValueError(f"an audit record's time must be finite, not {at!r}")
    if key is None:
        body = (
            f'{{"at":{at!r},"data":{data_text},"kind":{_str(kind)},'
            f'"prev":{_str(head.hash)},"revision":{int(revision)},"seq":{seq},'
            f'"tenant":{_str(tenant)},"tx":{_str(tx_id)}}}'
        )
        return AuditRecord(tx_id, seq, kind, at, body, digest(body))
    body = (
        f'{{"at":{at!r},"data":{data_text},"key_id":{_str(key.id)},"kind":{_str(kind)},'
        f'"prev":{_str(head.hash)},"revision":{int(revision)},"scheme":"{HMAC_SHA256}",'
        f'"seq":{seq},"tenant":{_str(tenant)},"tx":{_str(tx_id)}}}'
    )
    return AuditRecord(tx_id, seq, kind, at, body, key.mac(body))


def json_string(text: str) -> str:
    """``text`` as a JSON string, the way ``canonical`` writes it (non-ASCII kept)."""
    return _str(text)


def chain_records(
    head: ChainHead,
    *,
    tx_id: str,
    tenant: str,
    at: float,
    revision: int,
    events: Iterable[tuple[str, Mapping[str, Any]]],
    key: AuditKey | None = None,
) -> tuple[AuditRecord, ...]:
    """``events`` (kind, data) as records following ``head`` and each other."""
    out: list[AuditRecord] = []
    for kind, data in events:
        rec = make_record(
            head,
            tx_id=tx_id,
            tenant=tenant,
            kind=kind,
            at=at,
            revision=revision,
            data=data,
            key=key,
        )
        out.append(rec)
        head = rec.head
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Anchor:
    """What outlives a truncation of the chain, to compare its end with: the transaction's
    revision (every durable change of the transaction writes at least one record carrying the
    revision it made) and each outbox row's attempts (each attempt writes one record)."""

    revision: int  # 0: the transaction row is gone; nothing to compare
    deliveries: Mapping[int, int]  # outbox row id → attempts the row counts
    # Step records not chained yet (``docs/audit.md``, "Batched step records"): successful
    # steps after the row's ``audit_seq``, each of which moved the revision by one; the
    # chain's end plus these must reach the row's revision.
    pending: int = 0
    # The chain's head when retention deleted the transaction's row (its tombstone), None
    # while the row is there (or for a row deleted before tombstones existed, schema < 5):
    # the chain must still hold that very record.
    end: ChainHead | None = None


TOMBSTONE = "retention's tombstone"  # who recorded an ``Anchor.end``, as ``check_end`` says


@dataclass(frozen=True, slots=True)
class AuditVerification:
    """The result of checking one chain. ``ok`` iff every record is intact and in place, and
    every keyed record was checked with its key."""

    transaction_id: str
    ok: bool
    records: int  # how many records the chain holds
    first_bad: int  # seq of the first bad, missing or unchecked record; 0 iff ok
    reason: str  # what is wrong with it (or what could not be checked), "" iff ok
    head_hash: str  # the newest record's hash (keep it elsewhere to detect a rewrite)
    # Successful steps of an active transaction whose records are not chained yet: they are
    # in the journal and the next write of the transaction chains them (0 once it has).
    pending: int = 0
    # Keyed records whose key the verifier does not hold: their links were followed but
    # their MACs not checked, so the chain is not ok (and not known bad: ``reason`` says
    # which key to give). 0 when every record was checked, or a record is bad.
    unchecked: int = 0


def verify_chain(
    tx_id: str,
    records: Sequence[AuditRecord],
    anchor: Anchor | None = None,
    keys: AuditKeys | None = None,
) -> AuditVerification:
    """Check ``records`` (as loaded, in ``seq`` order) as the chain of ``tx_id``; ``keys``:
    the audit keys the verifier holds (None: none), to check keyed records with."""
    head = records[-1].hash if records else GENESIS

    def bad(seq: int, reason: str) -> AuditVerification:
        return AuditVerification(tx_id, False, len(records), seq, reason, head)

    if not records:
        gone = bad(1, "the transaction has no audit records")
        if anchor is not None and anchor.end is not None:
            return check_end(gone, None, anchor.end, TOMBSTONE)
        return gone
    prev, revision = GENESIS, 0
    delivered: dict[int, int] = {}
    first_keyed = 0  # seq of the chain's first keyed record; 0: none so far
    unchecked: dict[str, int] = {}  # key id → its records this verifier could not check
    first_unchecked = 0
    for i, rec in enumerate(records):
        expected = i + 1
        if rec.seq != expected:
            return bad(
                expected,
                f"record {expected} is missing (found record {rec.seq} in its place): "
                "removed or reordered",
            )
        try:
            content = json.loads(rec.body)
            fields = (content["tx"], content["seq"], content["kind"], content["prev"])
            rec_revision = int(content["revision"])
            scheme = content.get("scheme")
            key_id = content.get("key_id") if scheme is not None else None
        except (ValueError, KeyError, TypeError, AttributeError):
            return bad(expected, f"record {expected} is not an audit record")
        if scheme is None:
            if digest(rec.body) != rec.hash:
                return bad(expected, f"record {expected} was edited: its hash does not match it")
            if first_keyed:
                return bad(
                    expected,
                    f"record {expected} is not keyed (a plain SHA-256), but record "
                    f"{first_keyed} before it is: it was re-hashed without the audit key, or "
                    "written by a process that was not given the key",
                )
        elif scheme != HMAC_SHA256:
            return bad(expected, f"record {expected} names an unknown hash scheme {scheme!r}")
        elif not isinstance(key_id, str):
            return bad(expected, f"record {expected} is keyed but names no key_id")
        else:
            first_keyed = first_keyed or expected
            key = keys.keys.get(key_id) if keys is not None else None
            if key is None:
                unchecked[key_id] = unchecked.get(key_id, 0) + 1
                first_unchecked = first_unchecked or expected
            elif not hmac.compare_digest(key.mac(rec.body), rec.hash):
                return bad(
                    expected,
                    f"record {expected} does not match its HMAC under audit key {key_id!r}: "
                    "it was edited or re-hashed without the key, or the key given as "
                    f"{key_id!r} is not the one it was written with",
                )
        if fields[:3] != (tx_id, rec.seq, rec.kind):
            return bad(expected, f"record {expected} was moved: its columns disagree with it")
        if fields[3] != prev:
            return bad(
                expected,
                f"record {expected} does not follow record {i}: a record was removed, "
                "inserted or reordered",
            )
        if i == 0 and rec.kind not in FIRST_KINDS:
            return bad(1, f"the chain starts with {rec.kind!r}, not with the transaction's begin")
        if rec_revision < revision:
            return bad(expected, f"record {expected} goes back to revision {rec_revision}")
        if rec.kind == AuditKind.DELIVERY.value:
            data = content.get("data", {})
            delivered[int(data.get("outbox_id", 0))] = int(data.get("attempt", 0))
        prev, revision = rec.hash, rec_revision
    pending = 0
    if anchor is not None and anchor.end is not None:
        ended = check_end(
            AuditVerification(tx_id, True, len(records), 0, "", head),
            records[anchor.end.seq - 1] if anchor.end.seq <= len(records) else None,
            anchor.end,
            TOMBSTONE,
        )
        if not ended.ok:
            return ended
    if anchor is not None:
        after = len(records) + 1
        pending = anchor.pending
        if anchor.revision and revision + pending != anchor.revision:
            waiting = f" and {plural(pending, 'step record')} not chained yet" if pending else ""
            return bad(
                after,
                f"the chain ends at revision {revision}{waiting} but the transaction is at "
                f"revision {anchor.revision}: its newest records were removed",
            )
        for outbox_id, attempts in sorted(anchor.deliveries.items()):
            if attempts and delivered.get(outbox_id, 0) < attempts:
                return bad(
                    after,
                    f"effect {outbox_id} was attempted {plural(attempts, 'time')} but the chain "
                    f"records {delivered.get(outbox_id, 0)}: delivery records were removed",
                )
    if keys is not None and not first_keyed:
        # A keyed record binds every record before it (its MAC covers ``prev``), so a chain
        # is safe from a rewrite iff it ends keyed. One with no keyed record at all is either
        # older than the key or a rewrite without it; the key cannot tell which, so the chain
        # is unchecked (never ok), not bad: a store that had chains before --audit-key was set
        # is not reported as tampered with, and an anchor settles each such chain.
        return AuditVerification(
            tx_id,
            False,
            len(records),
            1,
            f"none of its {plural(len(records), 'record')} is keyed, so "
            f"{named('audit key', _ids(keys.keys))} cannot check it: it was written before "
            "the server had --audit-key, or rewritten and re-hashed without the key; hold it "
            "to an anchor written before the key was set (--anchor FILE, docs/audit.md)",
            head,
            pending,
            len(records),
        )
    if unchecked:
        count = sum(unchecked.values())
        return AuditVerification(
            tx_id,
            False,
            len(records),
            first_unchecked,
            f"{count} of its {plural(len(records), 'record')} (from record {first_unchecked}) "
            f"are keyed with {named('audit key', _ids(unchecked))}, which this verifier does "
            f"not hold: they cannot be checked; give it the audit key file with "
            f"{', '.join(_ids(unchecked))} "
            f"({KEY_HOW_TO})",
            head,
            pending,
            count,
        )
    return AuditVerification(tx_id, True, len(records), 0, "", head, pending)


def _ids(ids: Iterable[str]) -> list[str]:
    return [repr(i) for i in sorted(ids)]


def check_end(
    v: AuditVerification, at_seq: AuditRecord | None, end: ChainHead, source: str
) -> AuditVerification:
    """``v`` held against ``end``, a head of the chain that ``source`` recorded outside the
    chain (retention's tombstone, an anchor file): the chain must still hold that very record,
    and may have grown since. ``at_seq`` is the chain's record at ``end.seq`` (None if it has
    none). A chain already bad stays as it is, unless it is gone whole (no records): then it
    says so with what ``source`` recorded. One with unchecked keyed records is held all the
    same (where it ends does not need the key), and stays unchecked if it passes."""
    if v.records == 0:
        return replace(
            v,
            ok=False,
            unchecked=0,
            first_bad=1,
            reason=f"the chain is gone, but {source} recorded its record {end.seq} "
            f"(hash {end.hash[:16]}): it was removed whole",
        )
    if not v.ok and not v.unchecked:
        return v
    if at_seq is None or v.records < end.seq:
        return replace(
            v,
            ok=False,
            unchecked=0,
            first_bad=v.records + 1,
            reason=f"the chain ends at record {v.records}, but {source} recorded its record "
            f"{end.seq}: its newest records were removed",
        )
    if at_seq.seq != end.seq or at_seq.hash != end.hash:
        return replace(
            v,
            ok=False,
            unchecked=0,
            first_bad=end.seq,
            reason=f"record {end.seq} is not the one {source} recorded (hash "
            f"{end.hash[:16]}): the chain was rewritten",
        )
    if v.unchecked and v.records == end.seq and source != TOMBSTONE and _plain(at_seq):
        # A plain record never follows a keyed one, so the whole chain is plain and each
        # record was checked against its own hash; what the key could not vouch for, a head
        # kept outside the store does: the chain is as it was when the anchor was written.
        return replace(v, ok=True, unchecked=0, first_bad=0, reason="")
    return v


def _plain(rec: AuditRecord) -> bool:
    try:
        return "scheme" not in json.loads(rec.body)
    except ValueError:
        return False


__all__ = [
    "EMPTY",
    "GENESIS",
    "HMAC_SHA256",
    "KEY_HOW_TO",
    "Anchor",
    "AuditEvent",
    "AuditKey",
    "AuditKeys",
    "AuditKind",
    "AuditRecord",
    "AuditVerification",
    "ChainHead",
    "canonical",
    "chain_records",
    "check_end",
    "digest",
    "json_string",
    "make_record",
    "record_from_text",
    "text_digest",
    "verify_chain",
]
