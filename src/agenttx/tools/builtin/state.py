"""``state_tool``: how the built-ins over managed state only (kv, record, ``effect.stage``)
are declared, said once."""

from __future__ import annotations

import functools

from agenttx.tools.contract import tool

# Such a tool does no outside I/O and never sleeps: it cannot hang, so it runs without a
# timeout timer (``bounded``); and its writes and staged effects are buffered by the engine,
# so a dry run can run it for real and keep nothing (``full_simulation``).
state_tool = functools.partial(tool, bounded=True, dry_run="full_simulation")
