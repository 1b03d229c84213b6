"""The caller of a gRPC call: ``authorization: Bearer <key>`` metadata resolved by the ring.

gRPC lowercases metadata keys, so the key is matched as ``authorization``; a call with the
header twice is refused rather than guessing which one counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agenttx.auth.keys import KeyGrant, KeyRing, bearer_token
from agenttx.errors import Unauthenticated
from agenttx.types import Caller

AUTHORIZATION = "authorization"


def caller_of_metadata(keys: KeyRing, metadata: Iterable[tuple[str, Any]] | None) -> Caller:
    return grant_of_metadata(keys, metadata).caller


def grant_of_metadata(keys: KeyRing, metadata: Iterable[tuple[str, Any]] | None) -> KeyGrant:
    """The grant of the call's key, for a stream that must end when the key is revoked."""
    values = [v for k, v in metadata or () if k == AUTHORIZATION]
    if len(values) > 1:
        raise Unauthenticated("the call carries `authorization` twice; send one API key")
    value = values[0] if values else None
    if value is not None and not isinstance(value, str):
        raise Unauthenticated("`authorization` must be text: `Bearer <key>`")
    return keys.grant(bearer_token(value))
