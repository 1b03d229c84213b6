"""Releasing staged effects after commit: the outbox dispatcher and its channels."""

from agenttx.effects.channels import Channel, Effect, JsonlChannel, PermanentDeliveryError
from agenttx.effects.dispatcher import OutboxDispatcher

__all__ = ["Channel", "Effect", "JsonlChannel", "OutboxDispatcher", "PermanentDeliveryError"]
