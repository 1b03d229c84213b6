"""Step references: ``${steps.<id>.<path>}`` inside a step's arguments.

A step's arguments may use earlier steps' outputs. This module finds references (a pure syntax
scan) and resolves them against the outputs of completed steps; ``docs/references.md`` is the
user-facing description.

Syntax (a string value anywhere in the arguments, at any depth)::

    ${steps.<id>}                  the whole output of step <id>
    ${steps.<id>.<seg>.<seg>...}   a value inside it; a segment of ASCII digits indexes an
                                   array (or is an ordinary key of an object)
    $${                            a literal "${" — never the start of a reference

- A string that is exactly one reference becomes the referenced value with its JSON type.
- Inside a longer string a reference is interpolated: strings verbatim, anything else as
  compact JSON.
- Dict *keys* are names, not values: they are never resolved or unescaped.
- ``${`` not followed by the word ``steps`` is ordinary text (shell ``${HOME}`` passes through).
  ``${steps`` that does not parse as a reference is an error (``bad_syntax``): the agent plainly
  meant a reference, and handing the tool the raw text would hide the mistake.

Invariants:

- ``resolve`` never mutates its input; it returns a fresh structure, and a referenced object or
  array is copied, so a tool that mutates its arguments cannot touch a stored output.
- ``resolve`` raises nothing but ``UnresolvedReference``, whatever JSON it is given; it walks
  iteratively, so nesting depth cannot exhaust the stack.
- A step may only use steps with a lower id that are present in ``outputs``.
- With ``ResolveLimits``, the expansion is bounded *while* it happens: each reference's value
  is measured (a walk that stops at the remaining budget) before it is copied or encoded, so
  ``["${steps.1}"] * 500`` over a 1 MB output stops after about one megabyte of work, never
  builds 500 MB. The measure is a lower bound of the value's compact UTF-8 JSON (escapes not
  counted); the caller checks the final text exactly (``steps``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Defined in the one error tree; re-exported here, where callers find them.
from agenttx.errors import ArgumentsRefused
from agenttx.errors import UnresolvedKind as UnresolvedKind
from agenttx.errors import UnresolvedReference as UnresolvedReference
from agenttx.plural import plural
from agenttx.types import STAGED_OUTPUT_KEY

__all__ = [
    "Reference",
    "ResolveLimits",
    "UnresolvedKind",
    "UnresolvedReference",
    "find_references",
    "lookup_path",
    "resolve",
]

# Step ids and indexes are capped at 18 digits: int() refuses strings past ~4300 digits, and
# no real step or array gets near 10**18. A longer id fails the reference pattern and is
# reported as bad syntax; a longer index is simply "not there".
_MAX_DIGITS = 18

# One scanner for everything that can start with "$": the escape, a well-formed reference, and
# an attempted reference that is malformed. Alternatives are tried in this order at each
# position, so "$${" always wins over a reference starting one character later.
_TOKEN = re.compile(
    r"(?P<esc>\$\$\{)"
    r"|\$\{steps\.(?P<id>[0-9]{1,18})(?P<path>(?:\.[^.{}]+)*)\}"
    r"|(?P<bad>\$\{steps\b[^}]*\}?)"
)
_WHOLE = re.compile(r"\$\{steps\.([0-9]{1,18})((?:\.[^.{}]+)*)\}")

_MAX_SHOWN_KEYS = 20
_MAX_SHOWN_TEXT = 80


def _is_index(segment: str) -> bool:
    # str.isdigit alone accepts "²" and other Unicode digits that int() rejects.
    return segment.isascii() and segment.isdigit()


@dataclass(frozen=True, slots=True)
class Reference:
    """One ``${steps.<id>.<path>}`` found in a step's arguments."""

    step_id: int  # the producing step
    path: tuple[str, ...]  # segments inside that step's output; () is the whole output
    arg_path: tuple[str | int, ...]  # where the string holding it sits in the arguments

    @property
    def key(self) -> str:
        """The name this reference is about: the last non-numeric path segment, else the last
        argument key holding it, else ``""``. Used for hints and graph edges."""
        for segment in reversed(self.path):
            if not _is_index(segment):
                return segment
        for part in reversed(self.arg_path):
            if isinstance(part, str):
                return part
        return ""

    @property
    def text(self) -> str:
        """The reference as written: ``${steps.2.customer.id}``."""
        return "${steps." + ".".join((str(self.step_id), *self.path)) + "}"


# --- walking JSON ----------------------------------------------------------------------------

_Path = tuple[str | int, ...]
# While walking, a path is a chain of (parent, key) links, materialized into a tuple only for
# a string that holds "${": copying a tuple per container would be quadratic in the depth.
_Link = tuple[Any, str | int] | None


def _materialize(link: _Link) -> _Path:
    parts: list[str | int] = []
    while link is not None:
        link, key = link
        parts.append(key)
    return tuple(reversed(parts))


def _strings(arguments: Any) -> Iterator[tuple[_Path, str]]:
    """Every string value (not key) containing ``${``, with its path, in document order. Only
    dicts and lists are descended; anything else is an opaque leaf. Iterative."""
    stack: list[tuple[_Link, Any]] = [(None, arguments)]
    while stack:
        link, value = stack.pop()
        if isinstance(value, str):
            if "${" in value:
                yield _materialize(link), value
            continue
        if isinstance(value, dict):
            children: list[tuple[str | int, Any]] = list(value.items())
        elif isinstance(value, list):
            children = list(enumerate(value))
        else:
            continue
        # Pushed in reverse so they pop in document order; only what can hold a reference.
        for key, child in reversed(children):
            if isinstance(child, dict | list) or (isinstance(child, str) and "${" in child):
                stack.append(((link, key), child))


def _transform(value: Any, on_string: Callable[[str, _Path], Any] | None) -> Any:
    """A fresh copy of ``value`` (dicts and lists rebuilt, leaves shared) in which every string
    containing ``${`` is replaced by ``on_string(text, path)``, called in document order.
    Iterative, so nesting depth cannot exhaust the stack."""
    if isinstance(value, str):
        return on_string(value, ()) if on_string is not None and "${" in value else value
    if not isinstance(value, dict | list):
        return value
    root: Any = {} if isinstance(value, dict) else []
    # Each frame: the source's remaining items, its copy, its path. A nested container is
    # linked into its copy's parent, then entered at once (the parent's iterator waits), which
    # keeps on_string calls in document order.
    stack: list[tuple[Iterator[tuple[Any, Any]], Any, _Link]] = [(_items(value), root, None)]
    while stack:
        items, copy, link = stack[-1]
        for key, child in items:
            entered = None
            if isinstance(child, str):
                if on_string is not None and "${" in child:
                    child = on_string(child, _materialize((link, key)))
            elif isinstance(child, dict | list):
                entered = child
                child = {} if isinstance(child, dict) else []
            if isinstance(copy, dict):
                copy[key] = child
            else:
                copy.append(child)
            if entered is not None:
                stack.append((_items(entered), child, (link, key)))
                break
        else:
            stack.pop()
    return root


def _items(container: dict[Any, Any] | list[Any]) -> Iterator[tuple[Any, Any]]:
    return iter(container.items()) if isinstance(container, dict) else enumerate(container)


def _child(value: Any, segment: str | int) -> tuple[bool, Any]:
    """One step down a path: ``(found, child)``."""
    if isinstance(value, dict):
        name = segment if isinstance(segment, str) else str(segment)
        if name in value:
            return True, value[name]
        return False, None
    if isinstance(value, list):
        if isinstance(segment, int):
            index = segment
        elif _is_index(segment) and len(segment) <= _MAX_DIGITS:
            index = int(segment)
        else:
            return False, None
        if 0 <= index < len(value):
            return True, value[index]
    return False, None


def lookup_path(value: Any, path: Sequence[str | int]) -> Any:
    """The value at ``path`` inside ``value`` (reference rules: numeric segments index arrays).
    Raises ``KeyError`` naming the first segment that is not there."""
    for segment in path:
        found, value = _child(value, segment)
        if not found:
            raise KeyError(segment)
    return value


# --- finding and resolving -----------------------------------------------------------------


def _split(path_text: str) -> tuple[str, ...]:
    return tuple(path_text.split(".")[1:]) if path_text else ()


def find_references(arguments: Any) -> list[Reference]:
    """Every well-formed reference in ``arguments``, in document order (a syntax scan only:
    outputs are not consulted, malformed ``${steps…`` text and escapes are skipped)."""
    found: list[Reference] = []
    for arg_path, text in _strings(arguments):
        for match in _TOKEN.finditer(text):
            step = match.group("id")
            if step is not None:
                found.append(Reference(int(step), _split(match.group("path")), arg_path))
    return found


@dataclass(frozen=True, slots=True)
class ResolveLimits:
    """How far references may expand a step's arguments (``EngineConfig``'s settings)."""

    max_bytes: int  # UTF-8 bytes of the resolved arguments' compact JSON
    max_references: int  # references in the arguments, each occurrence counted
    sent_bytes: int = 0  # size of the arguments as sent: what the references add to


class _Budget:
    """The bytes and references left while one ``resolve`` runs."""

    __slots__ = ("left", "limits", "references")

    def __init__(self, limits: ResolveLimits) -> None:
        self.limits = limits
        self.left = limits.max_bytes - limits.sent_bytes
        self.references = 0

    def take(self, ref: Reference, value: Any, *, whole: bool) -> None:
        self.references += 1
        if self.references > self.limits.max_references:
            raise ArgumentsRefused(
                f"the arguments hold more than {self.limits.max_references} references "
                "(max_references); reference a whole object once instead of each of its parts",
                limit="max_references",
            )
        # The reference's own text leaves the arguments (with its quotes when it is the whole
        # string); its value comes in (a string inside a longer one: without quotes).
        self.left += len(ref.text) + (2 if whole else 0)
        if not whole and isinstance(value, str):
            self.left -= len(value)
        else:
            self.left -= json_size_within(value, self.left)
        if self.left < 0:
            raise too_large(self.limits.max_bytes)


def too_large(max_bytes: int) -> ArgumentsRefused:
    return ArgumentsRefused(
        f"the references expand the arguments past {max_bytes} bytes "
        "(max_resolved_arguments_bytes); reference a smaller part of an output, or fewer times",
        limit="max_resolved_arguments_bytes",
    )


def json_size_within(value: Any, budget: int) -> int:
    """A lower bound of the UTF-8 bytes of ``value``'s compact JSON, exact up to escapes
    and multi-byte characters; once past ``budget`` the walk stops and returns more than it.
    Iterative, so it costs at most about ``budget`` steps whatever the value's size."""
    size = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, dict):
            size += 2 + max(len(item) - 1, 0)  # braces and commas
            for key, child in item.items():
                size += len(key) + 3 if isinstance(key, str) else 3  # quotes and colon
                stack.append(child)
        elif isinstance(item, list):
            size += 2 + max(len(item) - 1, 0)
            stack.extend(item)
        elif item is None or isinstance(item, bool):
            size += 4
        else:
            size += 1  # a number: at least one digit (its text is measured exactly later)
        if size > budget:
            return size
    return size


def resolve(
    arguments: Any,
    outputs: Mapping[int, Any],
    current_step: int,
    limits: ResolveLimits | None = None,
) -> tuple[Any, list[Reference]]:
    """Return (resolved arguments, references used, in document order).

    Raises ``UnresolvedReference`` for a reference to a step ``>= current_step``, to a step not
    in ``outputs`` (not completed), to a missing key or index, or for malformed ``${steps…``;
    with ``limits``, ``ArgumentsRefused`` as soon as the expansion passes one of them.
    """
    used: list[Reference] = []
    budget = _Budget(limits) if limits is not None else None

    def on_string(text: str, arg_path: _Path) -> Any:
        whole = _WHOLE.fullmatch(text)
        if whole is not None:
            ref = Reference(int(whole.group(1)), _split(whole.group(2)), arg_path)
            value = _value_of(ref, outputs, current_step)
            if budget is not None:
                budget.take(ref, value, whole=True)  # before the copy: nothing oversized is built
            used.append(ref)
            # Copy so the arguments never share a container with a stored output.
            return _transform(value, None)
        parts: list[str] = []
        position = 0
        for match in _TOKEN.finditer(text):
            parts.append(text[position : match.start()])
            position = match.end()
            if match.group("esc") is not None:
                parts.append("${")
                continue
            step = match.group("id")
            if step is None:
                raise _bad_syntax(match.group("bad"), arg_path)
            ref = Reference(int(step), _split(match.group("path")), arg_path)
            value = _value_of(ref, outputs, current_step)
            if budget is not None:
                budget.take(ref, value, whole=False)  # before the value is encoded into the text
            used.append(ref)
            parts.append(value if isinstance(value, str) else _compact_json(value))
        parts.append(text[position:])
        return "".join(parts)

    return _transform(arguments, on_string), used


def _value_of(ref: Reference, outputs: Mapping[int, Any], current_step: int) -> Any:
    if ref.step_id >= current_step or ref.step_id not in outputs:
        if ref.step_id == current_step:
            why = f"step {ref.step_id} is the current step; only earlier outputs can be used"
        else:
            why = f"step {ref.step_id} has not completed (current step {current_step})"
        raise UnresolvedReference(
            f"unavailable step reference {ref.text}: {why}",
            reference=ref.text,
            step_id=ref.step_id,
            key=ref.key,
            kind="unavailable_step",
        )
    value = outputs[ref.step_id]
    for depth, segment in enumerate(ref.path):
        found, child = _child(value, segment)
        if not found:
            raise _missing(ref, depth, value)
        value = child
    return value


def _missing(ref: Reference, depth: int, container: Any) -> UnresolvedReference:
    segment = ref.path[depth]
    if depth == 0 and isinstance(container, dict) and container.get(STAGED_OUTPUT_KEY) is True:
        return _staged(ref, container)
    where = f" at '{'.'.join(ref.path[:depth])}'" if depth else ""
    available: list[str] = []
    if isinstance(container, dict):
        available = sorted(str(k) for k in container)
        what = f"no key {segment!r}"
        detail = "keys: " + _shown(available) if available else "it has no keys"
    elif isinstance(container, list):
        if _is_index(segment):
            what = f"no index {segment}"
            detail = f"it is an array of {plural(len(container), 'item')}"
        else:
            what = f"no key {segment!r}"
            detail = f"it is an array of {plural(len(container), 'item')}; use a numeric index"
    else:
        what = f"no key {segment!r}"
        detail = f"it is {_json_kind(container)}"
    # The key a hint should name: the missing segment, or for an index the array's name.
    key = Reference(ref.step_id, ref.path[: depth + 1], ref.arg_path).key
    return UnresolvedReference(
        f"unresolved reference {ref.text}: step {ref.step_id} output{where} has {what} ({detail})",
        reference=ref.text,
        step_id=ref.step_id,
        key=key,
        kind="missing_key",
        available_keys=available,
    )


def _staged(ref: Reference, output: dict[str, Any]) -> UnresolvedReference:
    # The mistake is this step's (it asked for what cannot exist yet), not the staged step's:
    # step 0 and no key keep the controller from rewinding to the staged step (it would only
    # stage again): it retries this step, which the agent resends without the reference.
    tool = str(output.get("tool", ""))[:_MAX_SHOWN_TEXT]
    return UnresolvedReference(
        f"staged output {ref.text}: step {ref.step_id} is a staged call ({tool}) that "
        "runs only after commit, so its output exists only after commit; read what you need "
        "with a read tool, or use the result after committing",
        reference=ref.text,
        step_id=0,
        key="",  # no key to trace either: the graph would lead back to the staged step
        kind="staged_output",
    )


def _bad_syntax(text: str, arg_path: _Path) -> UnresolvedReference:
    shown = text if len(text) <= _MAX_SHOWN_TEXT else text[: _MAX_SHOWN_TEXT - 1] + "…"
    key = next((p for p in reversed(arg_path) if isinstance(p, str)), "")
    return UnresolvedReference(
        f"unresolved reference {shown}: bad reference syntax; write ${{steps.<id>.<path>}} "
        "with a numeric step id and non-empty keys, or $${ for a literal ${",
        reference=text,
        step_id=0,  # the mistake is in this step's arguments, not in any earlier step
        key=key,
        kind="bad_syntax",
    )


def _shown(keys: list[str]) -> str:
    if len(keys) <= _MAX_SHOWN_KEYS:
        return ", ".join(keys)
    return ", ".join(keys[:_MAX_SHOWN_KEYS]) + f", … (+{len(keys) - _MAX_SHOWN_KEYS} more)"


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def _compact_json(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        # Only non-JSON outputs (a cycle, absurd nesting) get here; never fail the step on it.
        return f"<{type(value).__name__}>"
