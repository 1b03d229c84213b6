"""One value copied field by field into another type that names its fields alike: a plain
dataclass (``agenttx.types``, ``agenttx.receipts``) into its protobuf message, or the message
back into the dataclass. The server's reply builders and the client's readers call this one
function, so the list of fields is the two types' own, never written out again per direction.

The names are the target's: a dataclass's ``__init__`` fields, or a message's descriptor
fields. Each is read from the source by the same name, so a name the source lacks raises
``AttributeError`` (a field added to one side only is found by the first test that copies it).
Fields copied so are scalars; a field whose value is built otherwise (a nested message, a
repeated field, a renamed or converted one) is passed in ``given``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


# The field names of each type copied into, read once (a type's fields never change).
_NAMES: dict[type, tuple[str, ...]] = {}


def _names(into: type) -> tuple[str, ...]:
    names = _NAMES.get(into)
    if names is None:
        if dataclasses.is_dataclass(into):
            names = tuple(f.name for f in dataclasses.fields(into) if f.init)
        else:
            descriptor: Any = into.DESCRIPTOR  # type: ignore[attr-defined]  # a protobuf message
            names = tuple(f.name for f in descriptor.fields)
        _NAMES[into] = names
    return names


def field_copy(source: object, into: type[T], /, **given: Any) -> T:
    """An ``into`` whose fields are ``source``'s of the same names, except those in ``given``."""
    values = {name: getattr(source, name) for name in _names(into) if name not in given}
    return into(**values, **given)
