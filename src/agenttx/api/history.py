"""A transaction's history in gRPC messages that fit the message limit.

A history grows without bound (every attempt of every step, each with up to 1 MiB of
arguments, 1 MiB of reasoning and its output), but a gRPC message is capped at 4 MiB: past it
the send fails with RESOURCE_EXHAUSTED after the engine has answered. So:

- ``fit_transaction`` trims a ``GetTransactionResponse`` that would not fit, in priority order:
  the scalar fields, constraints, metadata and policy always stay; then the reference's
  ``context`` gets the room it needs (the largest ``raw_context`` texts elided first, if it
  needs more than there is); then the dependency ``edges``; then our ``steps`` (the largest
  ``arguments_json`` / ``output_json`` elided first, then the newest records left out). The
  reply says what it did (``history_trimmed``, ``steps_omitted``, ``steps_page_token``).
- ``fill_page`` fills one ``ListStepsResponse`` with records up to a count and the byte
  limit, so ``ListSteps`` reads any history whole, page by page.

An elided text is replaced by a marker saying so and where to read it in full (for a JSON field
the marker is a JSON string, so the field still parses), and the field's name is recorded
(``StepRecord.elided``, ``ContextEntry.raw_context_elided``).

Sizes are bytes of the encoded message (``ByteSize()``). Each element is measured once, and
once more for each text elided in it (at most two); elision goes by size classes (powers of
two) from the largest down, never by sorting, and stops at the first text that makes the
reply fit — so fitting is linear in the size of the history, and no text kept is more than
twice the size of one elided.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agenttx.errors import InvalidArgument
from agenttx.wire import agenttx_pb2 as pb

MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # the reference's cap, for either direction
# Room kept for the trimming fields (a bool, a count, a page token: under 20 bytes) so that
# setting them never pushes a reply that was just fitted over the limit.
_TRIM_FIELDS_BYTES = 32
# A text this short is not worth replacing: the marker would be about as long.
_MIN_ELIDED_BYTES = 256

READ_IN_FULL = "read it in full with ListSteps"
TOO_LARGE_FOR_ANY_REPLY = "no reply can carry this step whole; Engine.get_transaction returns it"

# Field numbers of the repeated fields whose elements are measured.
_CONTEXT = pb.GetTransactionResponse.CONTEXT_FIELD_NUMBER
_EDGES = pb.GetTransactionResponse.EDGES_FIELD_NUMBER
_STEPS = pb.GetTransactionResponse.STEPS_FIELD_NUMBER
_PAGE_STEPS = pb.ListStepsResponse.STEPS_FIELD_NUMBER
_PAGE_CONTEXT = pb.ListStepsResponse.CONTEXT_FIELD_NUMBER

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


def _varint_bytes(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def element_bytes(field_number: int, message_bytes: int) -> int:
    """Bytes an embedded message of ``message_bytes`` adds to its parent under that field:
    the tag, the length prefix and the message."""
    return _varint_bytes(field_number << 3) + _varint_bytes(message_bytes) + message_bytes


def marker(field: str, size: int, how: str, *, json_text: bool) -> str:
    """What an elided text is replaced by; a JSON string for the ``*_json`` fields."""
    text = f"[elided by agenttx: {field} of {size} bytes does not fit the 4 MiB reply; {how}]"
    return json.dumps(text) if json_text else text


@dataclass(slots=True)
class _Text:
    """One elidable text: field ``name`` of the ``index``-th element, ``size`` bytes long."""

    index: int
    name: str
    size: int


def _elide(message: Any, name: str, size: int, how: str) -> None:
    if isinstance(message, pb.ContextEntry):
        message.raw_context = marker(name, size, how, json_text=False)
        message.raw_context_elided = True
    else:
        setattr(message, name, marker(name, size, how, json_text=True))
        message.elided.append(name)


def _fit(
    elements: Sequence[Any], field_number: int, names: Sequence[str], budget: int, how: str
) -> tuple[int, int]:
    """Make a prefix of ``elements`` (the repeated field ``field_number``) fit in ``budget``
    bytes: elide their ``names`` texts, largest size class first, until all fit; if even that
    is not enough, keep the longest prefix that does. Returns (elements kept, their bytes)."""
    sizes = [element_bytes(field_number, e.ByteSize()) for e in elements]
    total = sum(sizes)
    if total > budget:
        classes: dict[int, list[_Text]] = {}
        for i, e in enumerate(elements):
            for name in names:
                size = len(getattr(e, name).encode())
                if size >= _MIN_ELIDED_BYTES:
                    classes.setdefault(size.bit_length(), []).append(_Text(i, name, size))
        # Largest size class first, inside a class the oldest element first; each elision is
        # measured exactly and elision stops at the text that makes everything fit, so no
        # text is kept that is more than twice the size of one elided.
        for bits in sorted(classes, reverse=True):  # at most ~30 classes
            for text in classes[bits]:
                element = elements[text.index]
                _elide(element, text.name, text.size, how)
                new = element_bytes(field_number, element.ByteSize())
                total += new - sizes[text.index]
                sizes[text.index] = new
                if total <= budget:
                    break
            if total <= budget:
                break
    if total <= budget:
        return len(elements), total
    used = 0
    for kept, size in enumerate(sizes):
        if used + size > budget:
            return kept, used
        used += size
    return len(sizes), used


def fit_transaction(
    reply: pb.GetTransactionResponse, limit: int = MAX_MESSAGE_BYTES
) -> pb.GetTransactionResponse:
    """``reply``, trimmed in place to at most ``limit`` encoded bytes (see the module)."""
    total = reply.ByteSize()
    if total <= limit:
        return reply
    reply.history_trimmed = True
    context, edges, steps = list(reply.context), list(reply.edges), list(reply.steps)
    listed = sum(
        element_bytes(number, e.ByteSize())
        for number, part in ((_CONTEXT, context), (_EDGES, edges), (_STEPS, steps))
        for e in part
    )
    budget = limit - _TRIM_FIELDS_BYTES - (reply.ByteSize() - listed)

    kept, used = _fit(context, _CONTEXT, ("raw_context",), budget, READ_IN_FULL)
    del reply.context[kept:]
    budget -= used
    kept, used = _fit(edges, _EDGES, (), budget, READ_IN_FULL)
    del reply.edges[kept:]
    budget -= used
    kept, _ = _fit(steps, _STEPS, ("arguments_json", "output_json"), budget, READ_IN_FULL)
    if kept < len(steps):
        del reply.steps[kept:]
        reply.steps_omitted = len(steps) - kept
        reply.steps_page_token = page_token(kept)
    return reply


# -- ListSteps ---------------------------------------------------------------------------------


def page_token(offset: int) -> str:
    """The token of the page that starts at the ``offset``-th record of the history. Records
    are never removed from a history (a rewind marks them not live), so an offset stays put."""
    return str(offset)


def page_offset(token: str) -> int:
    if not token:
        return 0
    if not token.isdigit() or len(token) > 12:
        raise InvalidArgument(f"page_token {token[:40]!r} is not one ListSteps returned")
    return int(token)


def page_size(requested: int) -> int:
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    if not 1 <= requested <= MAX_PAGE_SIZE:
        raise InvalidArgument(f"page_size must be 1..{MAX_PAGE_SIZE}")
    return requested


def fill_page(
    page: pb.ListStepsResponse,
    records: Iterable[tuple[pb.StepRecord, pb.ContextEntry | None]],
    count: int,
    limit: int = MAX_MESSAGE_BYTES,
) -> int:
    """Append up to ``count`` of ``records`` (a step record and its context entry, if it has
    one) to ``page`` while the page stays within ``limit`` bytes; returns how many were
    taken. The first record is always taken: one too large for any message on its own has its
    large texts elided, with a marker saying so."""
    budget = limit - _TRIM_FIELDS_BYTES - page.ByteSize()
    taken = 0
    for record, entry in itertools.islice(records, count):
        cost = element_bytes(_PAGE_STEPS, record.ByteSize())
        if entry is not None:
            cost += element_bytes(_PAGE_CONTEXT, entry.ByteSize())
        if cost > budget and taken:
            break
        if cost > budget:
            cost = _shrink_alone(record, entry, budget)
        page.steps.append(record)
        if entry is not None:
            page.context.append(entry)
        budget -= cost
        taken += 1
    return taken


def _shrink_alone(record: pb.StepRecord, entry: pb.ContextEntry | None, budget: int) -> int:
    """Elide what must go for one record and its entry to fit a page by themselves."""
    spent = 0
    if entry is not None:
        _, spent = _fit(
            [entry], _PAGE_CONTEXT, ("raw_context",), budget // 2, TOO_LARGE_FOR_ANY_REPLY
        )
    _, used = _fit(
        [record],
        _PAGE_STEPS,
        ("arguments_json", "output_json"),
        budget - spent,
        TOO_LARGE_FOR_ANY_REPLY,
    )
    return spent + used
