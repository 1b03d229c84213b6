"""The scenario tools every framework's tests wrap, as plain functions: each framework's tools
module (``lg_tools``, ``oa_tools``, ``pai_tools``) makes its own tools of these and its
``TOOLS`` of those, which the tests load into the engine and ``agenttx serve --tools`` serves.

``book_room`` stands for an outside system: each booking and each cancellation appends a JSON
line to the ``log`` file it is given, so a test sees which ran, in order (``journal``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import agenttx

SIZES = {"blue": 4, "red": 12}

# What the scenarios declare of the tools: room_size only reads; a booking is taken back by
# cancel_room (each framework passes its own wrapper of it as the undo); order_lunch is left
# undeclared, so it takes the framework's default effect (irreversible).
EFFECTS = {"book_room": "compensatable", "room_size": "read"}
ABORTING_EFFECTS = {"close_account": "irreversible"}


def _note(log: str, what: str, room: str) -> None:
    with Path(log).open("a", encoding="utf-8") as f:
        f.write(json.dumps({"did": what, "room": room}) + "\n")


def journal(log: str | Path) -> list[tuple[str, str]]:
    """What the outside system did, oldest first."""
    path = Path(log)
    if not path.exists():
        return []
    return [(d["did"], d["room"]) for d in map(json.loads, path.read_text().splitlines())]


def book_room(room: str, log: str) -> dict[str, str]:
    """Book a meeting room."""
    _note(log, "book", room)
    return {"booked": room}


def cancel_room(room: str, log: str) -> None:
    """Cancel a booking of a meeting room."""
    _note(log, "cancel", room)


async def room_size(room: str, delay_s: float = 0.0) -> int:
    """How many people fit in a room (answers after ``delay_s`` seconds)."""
    await asyncio.sleep(delay_s)
    if room not in SIZES:
        raise KeyError(f"no room named {room!r}; the rooms are {', '.join(SIZES)}")
    return SIZES[room]


def order_lunch(people: int) -> str:
    """Order lunch (nobody declared what it does: it is taken as irreversible)."""
    return f"lunch for {people}"


def close_account(account: str) -> None:
    """Close an account (the provider refuses beyond repair: the transaction is aborted)."""
    raise agenttx.FatalToolError(f"the provider closed account {account} already")
