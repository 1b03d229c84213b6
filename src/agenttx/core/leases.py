"""Who runs a step: the owner recorded on a RUNNING step row, and whether it is gone.

A step with an outside effect is leased to its engine ("host:pid:random") until the step
timeout plus 30 s. Recovery may take a RUNNING step over only when its owner is dead: the
lease expired, or the owner was a process on this host that no longer exists, or it was an
engine of this very process that has since been closed (a restarted engine, not a second
engine open on the same file).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any

from agenttx.store.contract import StepRow

# Owners of the engines open in this process; an engine adds itself on open, removes on close.
LIVE_OWNERS: set[str] = set()


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lease_dead(step: StepRow, now: float) -> bool:
    """True iff the process that ran ``step`` is gone (see the module docstring)."""
    return holder_gone(step.lease_owner, step.lease_until, now)


def holder_gone(owner: str, until: float, now: float) -> bool:
    """True iff a lease held by ``owner`` until ``until`` is free: expired, or its owner is
    gone (a step's, or a reconcile's, ``reconcile.py``)."""
    if until <= now:
        return True
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return owner not in LIVE_OWNERS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def lease_held(lease: Mapping[str, Any] | None, now: float) -> bool:
    """True iff ``lease`` (``{"owner", "until"}``, a reconcile's) is held by a live owner."""
    if not lease:
        return False
    return not holder_gone(str(lease["owner"]), float(lease["until"]), now)
