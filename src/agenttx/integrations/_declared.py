"""What a framework tool is declared to be where the engine runs, checked the same way for every
framework's ``as_agenttx_tools``; and the preview a person is shown, as plain data.

A framework tool nobody declared is taken to be irreversible (``DEFAULT_EFFECT``): its effects
cannot be assumed undoable, so a rewind never pretends to take them back, a crash during it is
an unknown outcome (never a silent second run), and previews and safety policies see it. It
cannot write AgentTx managed state or stage an effect, so ``state`` and ``staged`` are refused
(``FRAMEWORK_EFFECTS``): either would promise an undo or a deferral that never happens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from agenttx.errors import InvalidArgument
from agenttx.receipts import Preview
from agenttx.tools.contract import check_tool_name
from agenttx.types import EffectClass

__all__ = [
    "DEFAULT_EFFECT",
    "FRAMEWORK_EFFECTS",
    "check_declarations",
    "is_compensatable",
    "preview_shown",
]

DEFAULT_EFFECT = "irreversible"
FRAMEWORK_EFFECTS = ("read", "compensatable", "irreversible")


def check_declarations(
    names: Sequence[str], effects: Mapping[str, str], undo: Mapping[str, Any]
) -> None:
    """Refuse a declaration naming no tool of ``names``, and two tools of one name."""
    for given, what in ((effects, "effects"), (undo, "undo")):
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise InvalidArgument(
                f"{what} names {', '.join(map(repr, unknown))}, which "
                f"{'is' if len(unknown) == 1 else 'are'} not among the tools: {', '.join(names)}"
            )
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InvalidArgument(f"two tools are named {', '.join(map(repr, twice))}")


def is_compensatable(name: str, effect: str, has_undo: bool, kind: str) -> bool:
    """Whether the tool ``name`` (a ``kind`` tool: "a LangChain tool" …) of ``effect`` is
    compensatable, after refusing an effect it cannot have and an undo that does not fit."""
    check_tool_name(name)
    if effect not in FRAMEWORK_EFFECTS:
        raise InvalidArgument(
            f"tool {name}: effect {effect!r} is not one {kind} can have; use one of "
            f"{', '.join(FRAMEWORK_EFFECTS)} (a tool that writes AgentTx state or stages an "
            "effect is an @agenttx.tool of its own)"
        )
    compensatable = effect == EffectClass.COMPENSATABLE.value
    if compensatable and not has_undo:
        raise InvalidArgument(
            f"tool {name} is compensatable, so it needs an undo: pass undo={{{name!r}: "
            f"{kind} that takes the call back, given the same arguments}}"
        )
    if not compensatable and has_undo:
        raise InvalidArgument(f"tool {name} has an undo, so declare it compensatable")
    return compensatable


def preview_shown(p: Preview) -> dict[str, Any]:
    """What a person deciding on a commit is shown: the change and its receipt, plain data."""
    return {
        "agenttx": "approve_commit",
        "transaction_id": p.transaction_id,
        "receipt_id": p.receipt_id,
        "revision": p.revision,
        "expires_at": p.expires_at,
        "approval_reasons": list(p.approval_reasons),
        "changes": dataclasses.asdict(p.changes),
    }
