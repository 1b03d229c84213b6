"""The safety policy file (``--policy FILE``, TOML): what needs approval, what is forbidden,
how many steps a transaction may take. ``docs/safety.md`` documents the format.

    [approval]                      # a commit needs an approved receipt when the transaction
    tools = ["pay.charge"]          #   ran one of these tools,
    effects = ["irreversible"]      #   a tool of one of these effect classes,
    tenants = ["prod"]              #   or belongs to one of these tenants
    [forbid]
    irreversible = true             # refuse every step whose tool is irreversible
    tools = ["fs.write"]            # refuse these tools
    [limits]
    max_steps = 50                  # refuse step ids past this
    [modes]
    autonomous_trusted = false      # refuse to begin in autonomous_trusted

A bad file is refused when it is loaded (the server does not start) with its line and the
reason. The loaded ``SafetyPolicy`` is frozen; the engine asks it at begin, before a step runs
and when it decides whether a commit needs approval.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenttx.errors import PolicyViolation, StartupError
from agenttx.files import read_capped
from agenttx.receipts import Mode
from agenttx.types import EffectClass

# A policy file larger than this is refused before it is parsed: a policy is a few lines.
MAX_POLICY_FILE_BYTES = 1 << 20
MAX_STEPS_CAP = 1_000_000

# section → key → what the value must be ("names", "effects", "bool", "count").
_SCHEMA: Mapping[str, Mapping[str, str]] = {
    "approval": {"tools": "names", "effects": "effects", "tenants": "names"},
    "forbid": {"irreversible": "bool", "tools": "names"},
    "limits": {"max_steps": "count"},
    "modes": {"autonomous_trusted": "bool"},
}


@dataclass(frozen=True)
class SafetyPolicy:
    """The rules of one policy file; the default (no file) allows everything."""

    approval_tools: frozenset[str] = frozenset()
    approval_effects: frozenset[str] = frozenset()
    approval_tenants: frozenset[str] = frozenset()
    forbid_irreversible: bool = False
    forbid_tools: frozenset[str] = frozenset()
    max_steps: int = 0  # 0: no cap
    allow_autonomous_trusted: bool = True
    source: str = ""  # the file it came from ("" for the default)

    # ------------------------------------------------------------------ the checks

    def check_begin(self, mode: Mode) -> None:
        if mode is Mode.AUTONOMOUS_TRUSTED and not self.allow_autonomous_trusted:
            raise PolicyViolation(
                f"the safety policy ({self.source}) does not allow mode autonomous_trusted; "
                "begin in transactional or approval_required",
                rule="modes",
            )

    def check_step(self, step_id: int, tool_name: str, effect: str) -> None:
        """Refuse a step the policy forbids, before anything of it runs or is journalled."""
        if self.max_steps and step_id > self.max_steps:
            raise PolicyViolation(
                f"step {step_id} is past the safety policy's cap of {self.max_steps} steps per "
                f"transaction ({self.source}); commit or roll back this transaction",
                rule="max_steps",
            )
        if tool_name in self.forbid_tools:
            raise PolicyViolation(
                f"the safety policy ({self.source}) forbids tool {tool_name!r}; choose another",
                rule="forbid_tools",
            )
        if self.forbid_irreversible and effect == EffectClass.IRREVERSIBLE.value:
            raise PolicyViolation(
                f"the safety policy ({self.source}) forbids irreversible tools and "
                f"{tool_name!r} is irreversible; choose a tool that can be undone or staged",
                rule="forbid_irreversible",
            )

    def commit_approval_reasons(
        self, mode: Mode, tenant: str, steps: Iterable[tuple[str, str]]
    ) -> list[str]:
        """Why a commit of a transaction in ``mode``, of ``tenant``, whose live steps ran
        ``steps`` (tool, effect class), needs an approved receipt; empty if it does not. What
        a preview says and a commit checks, and what a read shows (the dashboard's approve
        screen appears where this is not empty)."""
        if mode is Mode.APPROVAL_REQUIRED:
            return ["mode approval_required"]
        if mode is Mode.AUTONOMOUS_TRUSTED:  # exempt from the approval rules
            return []
        return self.approval_reasons(tenant, steps)

    def approval_reasons(self, tenant: str, steps: Iterable[tuple[str, str]]) -> list[str]:
        """Why the policy requires approval for a transaction of ``tenant`` whose live steps
        ran ``steps`` (tool, effect class); empty if it does not."""
        reasons: list[str] = []
        if tenant in self.approval_tenants:
            reasons.append(f"policy: tenant {tenant!r} needs approval")
        tools = sorted({t for t, _ in steps if t in self.approval_tools})
        effects = sorted({e for _, e in steps if e in self.approval_effects})
        reasons += [f"policy: tool {t!r} needs approval" for t in tools]
        reasons += [f"policy: effect class {e!r} needs approval" for e in effects]
        return reasons


def load_safety_policy(path: str | Path) -> SafetyPolicy:
    """The policy in ``path``; a ``StartupError`` naming the file, the line and the reason
    if it cannot be read or breaks a rule (unknown section or key, wrong type, unknown
    effect class, a cap out of range)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_POLICY_FILE_BYTES:
            raise StartupError(
                f"--policy {p}: the file is {size} bytes, over the {MAX_POLICY_FILE_BYTES}-byte "
                "limit; a policy is a few lines"
            )
        raw = read_capped(p, MAX_POLICY_FILE_BYTES)
        if raw is None:  # not a regular file, or it grew since: its size said nothing
            raise StartupError(
                f"--policy {p}: it holds more than {MAX_POLICY_FILE_BYTES} bytes, the limit of a "
                "policy file"
            )
    except OSError as exc:
        raise StartupError(f"--policy {p}: cannot read it: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise StartupError(f"--policy {p}:{line}: not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise StartupError(f"--policy {p}: not valid TOML: {exc}") from None
    return _policy(p, text, data)


def _policy(path: Path, text: str, data: dict[str, Any]) -> SafetyPolicy:
    def bad(section: str, key: str | None, reason: str) -> StartupError:
        line = _line_of(text, section, key)
        where = f"[{section}]" + (f" {key}" if key else "")
        return StartupError(f"--policy {path}:{line}: {where}: {reason}")

    values: dict[str, Any] = {}
    for section, table in data.items():
        keys = _SCHEMA.get(section)
        if keys is None:
            raise bad(section, None, f"unknown section; use {', '.join(sorted(_SCHEMA))}")
        if not isinstance(table, dict):
            raise bad(section, None, "must be a table ([section] followed by keys)")
        for key, value in table.items():
            kind = keys.get(key)
            if kind is None:
                raise bad(section, key, f"unknown key; [{section}] takes {', '.join(keys)}")
            values[f"{section}.{key}"] = _value(
                kind, value, lambda r, s=section, k=key: bad(s, k, r)
            )
    return SafetyPolicy(
        approval_tools=frozenset(values.get("approval.tools", ())),
        approval_effects=frozenset(values.get("approval.effects", ())),
        approval_tenants=frozenset(values.get("approval.tenants", ())),
        forbid_irreversible=bool(values.get("forbid.irreversible", False)),
        forbid_tools=frozenset(values.get("forbid.tools", ())),
        max_steps=int(values.get("limits.max_steps", 0)),
        allow_autonomous_trusted=bool(values.get("modes.autonomous_trusted", True)),
        source=str(path),
    )


def _value(kind: str, value: Any, bad: Any) -> Any:
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad(f"must be true or false, not {value!r}")
        return value
    if kind == "count":
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad(f"must be a whole number, not {value!r}")
        if not 1 <= value <= MAX_STEPS_CAP:
            raise bad(f"must be 1..{MAX_STEPS_CAP}, not {value}")
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise bad(f"must be a list of non-empty strings, not {value!r}")
    if kind == "effects":
        known = {e.value for e in EffectClass}
        unknown = [v for v in value if v not in known]
        if unknown:
            raise bad(f"unknown effect class {unknown[0]!r}; use {', '.join(sorted(known))}")
    return value


def _line_of(text: str, section: str, key: str | None) -> int:
    """The line of ``key`` in ``[section]`` (or of the section's header): tomllib keeps no
    positions, so the text is scanned for them. 1 if neither is found (e.g. an inline
    table)."""
    current = ""
    header_line = 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.match(r"^\[\s*([^\]]+?)\s*\]", stripped)
        if header:
            current = header.group(1).strip().strip('"')
            if current == section:
                header_line = number
                if key is None:
                    return number
            continue
        if (
            key is not None
            and current == section
            and re.match(rf'^"?{re.escape(key)}"?\s*=', stripped)
        ):
            return number
        if (
            not current
            and key is not None
            and re.match(rf"^{re.escape(section)}\.{re.escape(key)}\s*=", stripped)
        ):
            return number
    return header_line or 1
