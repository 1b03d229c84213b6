"""Settings that were renamed so each concept has one name, and the old names that still work.

The rule (``docs/operations.md``, "Names"): one name per concept on every command, and a
duration's name ends in its unit — ``_s`` for seconds (``--step-timeout-s``,
``AGENTTX_STEP_TIMEOUT_S``, ``step_timeout_s=``), ``_days`` for retention periods; never
``_secs`` or ``_ms``. Milliseconds stay only on the wire, whose field names are the contract
(``retry_after_ms``). An old name keeps working: it is read as the new one (scaled, for a
change of unit) and a one-line notice on stderr says what to write instead. Given both, the
new name wins.

This module imports nothing internal: the CLI (flags, environment variables), the engine
(``Engine.open`` keywords) and the gateway file (TOML keys) read the same table.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Renamed:
    old: str  # the old name, snake_case: flag --old-name, environment AGENTTX_OLD_NAME
    new: str  # the name to use
    where: str  # what carries it: "serve" (serve and mcp flags), "tx begin", "Engine.open" …
    scale: float = 1.0  # new value = old value × scale (milliseconds → seconds: 0.001)

    @property
    def old_flag(self) -> str:
        return "--" + self.old.replace("_", "-")

    @property
    def new_flag(self) -> str:
        return "--" + self.new.replace("_", "-")

    def converted(self, value: Any) -> Any:
        """``value`` of the old name, in the new name's unit."""
        if value is None or self.scale == 1.0:
            return value
        return value * self.scale


# The one table: docs/operations.md ("Names") shows it, tests/repo/test_renamed_settings.py checks
# the rows on their surfaces ("serve": a flag of ``agenttx serve`` and ``agenttx mcp`` and its
# environment variable; "serve only": of ``agenttx serve``; "mcp only": of ``agenttx mcp``).
RENAMED: tuple[Renamed, ...] = (
    Renamed("agent_id", "agent", "tx begin"),
    Renamed("step_timeout_ms", "step_timeout_s", "serve", scale=0.001),
    Renamed("tx_idle_timeout_secs", "tx_idle_timeout_s", "serve"),
    Renamed("receipt_ttl_secs", "receipt_ttl_s", "serve"),
    Renamed("grace_secs", "grace_s", "serve only"),
    Renamed("http_header_timeout_secs", "http_header_timeout_s", "serve only"),
    # their first names, when only the HTTP event streams were counted
    Renamed("http_max_streams", "max_streams", "serve only"),
    Renamed("http_max_streams_per_key", "max_streams_per_key", "serve only"),
    # ``agenttx mcp`` had its own flag for the setting ``agenttx serve`` spells in full
    Renamed("effect_tools", "mcp_effect_tools", "mcp only"),
    Renamed("tx_idle_timeout_secs", "tx_idle_timeout_s", "Engine.open"),
    Renamed("dispatch_lease_secs", "dispatch_lease_s", "Engine.open"),
    # the setting is hint_rules on every entry (``--hint-rules``, ``agenttx.settings``)
    Renamed("hint_rule_files", "hint_rules", "Engine.open"),
    Renamed("timeout_ms", "timeout_s", "gateway tool", scale=0.001),
    Renamed("connect_timeout_ms", "connect_timeout_s", "gateway server", scale=0.001),
)


def renamed(where: str) -> tuple[Renamed, ...]:
    return tuple(r for r in RENAMED if r.where == where)


def notice(old: str, new: str) -> None:
    """The one-line deprecation notice, on stderr (never stdout: a script's output is kept)."""
    print(f"agenttx: {old} is deprecated; use {new} instead", file=sys.stderr)
