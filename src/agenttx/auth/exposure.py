"""Safe by default: a server without API keys listens on loopback only.

Without ``--api-keys`` anyone who reaches a port can do anything, so ``agenttx serve`` refuses
to bind gRPC or HTTP to anything but a loopback address (``127.0.0.0/8``, ``::1``,
``localhost``). Names other than ``localhost`` are refused too: what they resolve to can
change after the check.
"""

from __future__ import annotations

import ipaddress

HOW_TO_KEYS = (
    "create a key with `agenttx keys new --principal NAME --tenant TENANT --role agent`, add "
    "the printed [[key]] entry to a file and start with `--api-keys FILE` (and `--tls-cert`/"
    "`--tls-key` so keys do not cross the network in clear), or listen on 127.0.0.1"
)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_error(flag: str, host: str) -> str | None:
    """Why ``host`` cannot be bound without keys (None: it can)."""
    if is_loopback(host):
        return None
    return f"{flag} {host} is not a loopback address and no --api-keys are set: {HOW_TO_KEYS}"
