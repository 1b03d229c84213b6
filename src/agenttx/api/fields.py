"""A wire message as plain JSON fields: what the CLI prints with ``--json`` and what an MCP
result's ``structuredContent`` carries, so both show exactly the gRPC reply's fields.

Ints stay ints (``MessageToDict`` would make 64-bit ones strings), enums become their names,
and ``*_json`` text fields are parsed into a field without the suffix (``output_json`` →
``output``). ``short_enums`` drops an enum's type prefix (``STEP_STATUS_SUCCESS`` →
``SUCCESS``), the names the reference's MCP server uses.

Every MCP reply goes through here (a history of N steps: N step records), so what depends
only on the message type — each field's kind, its output name, an enum's names — is worked
out once per (type, ``short_enums``) and kept (``_plan``); a call only reads values.
"""

from __future__ import annotations

import json
from typing import Any

# How a field becomes JSON (``_plan``).
_SCALAR, _REPEATED, _JSON, _MAP, _MESSAGE, _MESSAGES, _ENUM, _ENUMS = range(8)

# (kind, field name, output name, has presence, enum names by number or None)
_Field = tuple[int, str, str, bool, dict[int, str] | None]
# Plans by (message descriptor, short_enums); a descriptor lives as long as its module.
_PLANS: dict[tuple[Any, bool], list[_Field]] = {}


def _plan(descriptor: Any, short_enums: bool) -> list[_Field]:
    key = (descriptor, short_enums)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    plan = []
    for fd in descriptor.fields:
        names: dict[int, str] | None = None
        out = fd.name
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            kind = _MAP
        elif fd.message_type is not None:
            kind = _MESSAGES if fd.is_repeated else _MESSAGE
        elif fd.enum_type is not None:
            prefix = enum_prefix(fd.enum_type.name) if short_enums else ""
            names = {
                n: str(v.name).removeprefix(prefix)
                for n, v in fd.enum_type.values_by_number.items()
            }
            kind = _ENUMS if fd.is_repeated else _ENUM
        elif fd.is_repeated:
            kind = _REPEATED
        elif fd.name.endswith("_json"):
            kind, out = _JSON, fd.name.removesuffix("_json")
        else:
            kind = _SCALAR
        plan.append((kind, fd.name, out, fd.has_presence, names))
    _PLANS[key] = plan
    return plan


def message_fields(
    message: Any, *, short_enums: bool = False, skip_unset_optional: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, name, key, presence, names in _plan(message.DESCRIPTOR, short_enums):
        value = getattr(message, name)
        if kind == _SCALAR:
            if skip_unset_optional and presence and not message.HasField(name):
                continue
            out[key] = value
        elif kind == _MESSAGE:
            out[key] = message_fields(
                value, short_enums=short_enums, skip_unset_optional=skip_unset_optional
            )
        elif kind == _MESSAGES:
            out[key] = [
                message_fields(v, short_enums=short_enums, skip_unset_optional=skip_unset_optional)
                for v in value
            ]
        elif kind == _JSON:
            out[key] = json.loads(value) if value else None
        elif kind == _ENUM:
            assert names is not None
            out[key] = names[value]  # an unknown number fails, as always
        elif kind == _ENUMS:
            assert names is not None
            out[key] = [names[v] for v in value]
        elif kind == _MAP:
            out[key] = dict(value)
        else:  # _REPEATED
            out[key] = list(value)
    return out


def enum_prefix(type_name: str) -> str:
    """``StepStatus`` → ``STEP_STATUS_`` (the proto style guide's value prefix)."""
    snake = "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(type_name))
    return snake.upper() + "_"
