"""LangChain tools for the integration tests, and the same tools as AgentTx tools (``TOOLS``),
which the tests load into the engine (``Engine.open(tools=TOOLS)``) as a user would, or serve.

``book_room`` stands for an outside system: each booking and each cancellation appends a JSON
line to the ``log`` file it is given, so a test sees which ran, in order."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from langchain_core.tools import tool

import agenttx
from agenttx.integrations.langgraph import as_agenttx_tools

SIZES = {"blue": 4, "red": 12}


def _note(log: str, what: str, room: str) -> None:
    with Path(log).open("a", encoding="utf-8") as f:
        f.write(json.dumps({"did": what, "room": room}) + "\n")


def journal(log: str | Path) -> list[tuple[str, str]]:
    """What the outside system did, oldest first."""
    path = Path(log)
    if not path.exists():
        return []
    return [(d["did"], d["room"]) for d in map(json.loads, path.read_text().splitlines())]


@tool
def book_room(room: str, log: str) -> dict[str, str]:
    """Book a meeting room."""
    _note(log, "book", room)
    return {"booked": room}


@tool
def cancel_room(room: str, log: str) -> None:
    """Cancel a booking of a meeting room."""
    _note(log, "cancel", room)


@tool
async def room_size(room: str, delay_s: float = 0.0) -> int:
    """How many people fit in a room (answers after ``delay_s``)."""
    await asyncio.sleep(delay_s)
    if room not in SIZES:
        raise KeyError(f"no room named {room!r}; the rooms are {', '.join(SIZES)}")
    return SIZES[room]


@tool
def order_lunch(people: int) -> str:
    """Order lunch (nobody declared what it does: it is taken as irreversible)."""
    return f"lunch for {people}"


FRAMEWORK_TOOLS = [book_room, room_size, order_lunch]
TOOLS = as_agenttx_tools(
    FRAMEWORK_TOOLS,
    effects={"book_room": "compensatable", "room_size": "read"},
    undo={"book_room": cancel_room},
)


@tool
def close_account(account: str) -> None:
    """Close an account (the provider refuses beyond repair: the transaction is aborted)."""
    raise agenttx.FatalToolError(f"the provider closed account {account} already")


ABORTING_TOOLS = as_agenttx_tools([close_account], effects={"close_account": "irreversible"})
