"""A wire message as plain JSON fields: what the CLI prints with ``--json`` and what an MCP
result's ``structuredContent`` carries, so both show exactly the gRPC reply's fields.

Ints stay ints (``MessageToDict`` would make 64-bit ones strings), enums become their names,
and ``*_json`` text fields are parsed into a field without the suffix (``output_json`` →
``output``). ``short_enums`` drops an enum's type prefix (``STEP_STATUS_SUCCESS`` →
``SUCCESS``), the names the reference's MCP server uses.
"""

from __future__ import annotations

import json
from typing import Any


def message_fields(
    message: Any, *, short_enums: bool = False, skip_unset_optional: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            out[fd.name] = dict(value)
        elif fd.message_type is not None:
            if fd.is_repeated:
                out[fd.name] = [
                    message_fields(
                        v, short_enums=short_enums, skip_unset_optional=skip_unset_optional
                    )
                    for v in value
                ]
            else:
                out[fd.name] = message_fields(
                    value, short_enums=short_enums, skip_unset_optional=skip_unset_optional
                )
        elif fd.enum_type is not None:
            by_number = fd.enum_type.values_by_number
            prefix = _enum_prefix(fd.enum_type.name) if short_enums else ""

            def name(number: int, by_number: Any = by_number, prefix: str = prefix) -> str:
                return str(by_number[number].name).removeprefix(prefix)

            out[fd.name] = [name(v) for v in value] if fd.is_repeated else name(value)
        elif fd.is_repeated:
            out[fd.name] = list(value)
        elif fd.name.endswith("_json"):
            out[fd.name.removesuffix("_json")] = json.loads(value) if value else None
        elif skip_unset_optional and fd.has_presence and not message.HasField(fd.name):
            continue
        else:
            out[fd.name] = value
    return out


def _enum_prefix(type_name: str) -> str:
    """``StepStatus`` → ``STEP_STATUS_`` (the proto style guide's value prefix)."""
    snake = "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(type_name))
    return snake.upper() + "_"
