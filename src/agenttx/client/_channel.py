"""The client's channel: the one place the blocking and the asyncio clients differ in more
than ``await``.

``grpc.aio`` takes interceptors when a channel is made and cannot add them to a ready one; a
blocking channel, made here or given by the caller, is wrapped in them. ``_async.py`` calls
``open_aio_channel``; scripts/gen_sync_client.py renames that call to ``open_channel`` in the
``_sync.py`` it writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc


def open_channel(
    channel: Any,
    target: str,
    credentials: Any,
    options: Sequence[tuple[str, Any]],
    interceptors: Sequence[Any],
) -> Any:
    """``channel``, else a new blocking channel to ``target`` (TLS when ``credentials`` is
    given); either wrapped in ``interceptors``."""
    if channel is None:
        channel = (
            grpc.secure_channel(target, credentials, options=options)
            if credentials is not None
            else grpc.insecure_channel(target, options=options)
        )
    if interceptors:
        channel = grpc.intercept_channel(channel, *interceptors)
    return channel


def open_aio_channel(
    channel: Any,
    target: str,
    credentials: Any,
    options: Sequence[tuple[str, Any]],
    interceptors: Sequence[Any],
) -> Any:
    """``channel``, else a new asyncio channel to ``target`` (TLS when ``credentials`` is
    given) with ``interceptors``; it belongs to the running event loop."""
    if channel is not None:
        return channel
    chosen = list(interceptors) or None
    if credentials is not None:
        return grpc.aio.secure_channel(target, credentials, options=options, interceptors=chosen)
    return grpc.aio.insecure_channel(target, options=options, interceptors=chosen)
