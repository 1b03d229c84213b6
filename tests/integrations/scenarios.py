"""The scenarios every framework's run is tested on, written once: what the scripted model
sends (calls as ``(tool name, call id, arguments)``, which each framework's model module turns
into its own messages), how it reads a hint, and what the test then checks of the service.

Its asserts are rewritten by pytest (``register_assert_rewrite`` in this folder's conftest), so
a failing check shows its values as a test's own assert does."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from agenttx import StepsNotRedone, TxStatus
from agenttx.receipts import Refusal
from agenttx.service import TransactionService
from agenttx.types import CommitResult
from scenario_tools import journal

Call = tuple[str, str, dict[str, Any]]


class Block(Protocol):
    """What the checks read of any framework's transaction block."""

    @property
    def transaction_id(self) -> str: ...
    @property
    def result(self) -> CommitResult | None: ...
    @property
    def status(self) -> TxStatus | None: ...
    @property
    def refusals(self) -> list[Refusal]: ...


async def committed_value(service: TransactionService, key: str) -> Any:
    """``key``'s committed value, as another agent reads it."""
    r = await service.begin(agent_id="reader")
    step = await service.execute_step(r.transaction_id, 1, "kv.get", {"key": key})
    await service.rollback(r.transaction_id)
    return step.output["value"] if step.output else None


async def live_steps(service: TransactionService, tx: str) -> list[str]:
    """The tool of each step that stands, in step order."""
    info = await service.get_transaction(tx)
    return [s.tool_name for s in info.steps if s.live]


# ------------------------------------------------------------------ a foreign-key failure


def invoicing(hint: str | None, turn: str = "") -> list[Call]:
    """Insert customer c-1, remember the customer id, write a draft named after it, insert an
    invoice for it. The first time (no ``hint``) it remembers c-404; told by the hint that
    c-404 is not a customer, it sends the steps the rewind undid again with c-1. ``turn``
    prefixes the later call ids, for a framework that wants each id once per run."""
    if hint is None:
        customer = "c-404"
        first: list[Call] = [("record--insert", "c1", {"table": "customers", "id": "c-1"})]
    else:
        assert "resumes at step 2" in hint
        wrong = re.search(r"customer '([\w-]+)' is not in customers", hint)
        assert wrong is not None, hint
        assert wrong[1] == "c-404"
        customer, first = "c-1", []  # the customer step 1 inserted, not the one the hint names
    return [
        *first,
        ("kv--put", f"{turn}c2", {"key": "session/customer", "value": customer}),
        ("fs--write", f"{turn}c3", {"path": "drafts/${steps.2.value}.json", "contents": "{}"}),
        (
            "record--insert",
            f"{turn}c4",
            {
                "table": "invoices",
                "id": "i-1",
                "fields": {"customer": "${steps.2.value}"},
                "references": {"customer": "customers"},
            },
        ),
    ]


def check_the_invoice_failure(said: str) -> None:
    """The one failure the model read: the invoice, rolled back with what it depended on."""
    assert said.startswith("AgentTx: record--insert (step 4) failed and was rolled back")
    assert "Undone by this rewind: steps 2 (kv--put), 3 (fs--write)." in said


async def check_invoiced(service: TransactionService, tx: Block) -> None:
    """The redo committed the four steps, with the customer step 1 inserted."""
    assert tx.result is not None
    assert tx.result.committed
    assert tx.result.steps_committed == 4
    assert tx.status is TxStatus.COMMITTED
    assert await committed_value(service, "session/customer") == "c-1"
    assert await live_steps(service, tx.transaction_id) == [
        "record.insert",
        "kv.put",
        "fs.write",
        "record.insert",
    ]


# ------------------------------------------------------------------ parallel calls


def sizing(first_delay: float = 0.05) -> list[Call]:
    """Three calls in one message, the first slow (``first_delay``) and the second failing."""
    return [
        ("room_size", "a", {"room": "red", "delay_s": first_delay}),
        ("kv--get", "b", {"key": "no-such-key"}),
        ("kv--put", "c", {"key": "size", "value": "${steps.1}"}),
    ]


# The call the failure left out, sent again alone in the next message.
SIZING_AGAIN: list[Call] = [("kv--put", "d", {"key": "size", "value": "${steps.1}"})]


def check_the_failed_and_the_unsent(failed: str, unsent: Sequence[str]) -> None:
    """The failing call's answer names it and where the transaction resumes; each call after
    it in the message was not run, and is told why."""
    assert "AgentTx: kv--get (step 2) failed" in failed
    assert "resumes at step 2" in failed
    assert unsent
    for said in unsent:
        assert said.startswith(
            "AgentTx: not run. An earlier call of the same message, kv--get (step 2), failed"
        )


async def check_sized(service: TransactionService, tx: Block) -> None:
    """The steps are in the message's order whichever call finished first; the calls after
    the failure were not sent; the redo committed."""
    info = await service.get_transaction(tx.transaction_id)
    attempts = [(s.step_id, s.tool_name, str(s.status)) for s in info.steps]
    assert attempts == [
        (1, "room_size", "SUCCESS"),
        (2, "kv.get", "FAILED"),
        (2, "kv.put", "SUCCESS"),
    ]
    assert tx.result is not None
    assert tx.result.steps_committed == 2
    assert await committed_value(service, "size") == 12


# ------------------------------------------------------------------ a block that raises


def booking(log: str) -> list[Call]:
    """Book blue, then red, in one message."""
    return [
        ("book_room", "b1", {"room": "blue", "log": log}),
        ("book_room", "b2", {"room": "red", "log": log}),
    ]


async def check_rolled_back_newest_first(service: TransactionService, tx: Block, log: str) -> None:
    """After the two bookings, the rollback cancelled them, the newest first."""
    assert journal(log)[2:] == [("cancel", "red"), ("cancel", "blue")]
    assert tx.status is TxStatus.ROLLED_BACK
    assert tx.result is None
    info = await service.get_transaction(tx.transaction_id)
    assert info.status is TxStatus.ROLLED_BACK


def check_refused_as_not_loaded(refused: BaseException, tx: Block) -> None:
    """A framework tool the service did not load is named, with the way to load it."""
    said = str(refused)
    assert "tool 'cancel_room' is not loaded on the server" in said
    assert "as_agenttx_tools" in said
    assert tx.status is TxStatus.ROLLED_BACK


# ------------------------------------------------------------------ owed steps

# Puts a key, then a read that fails and rewinds it (the read names the key's value); the model
# then gives up without sending the undone step again.
FORGETTING: list[Call] = [
    ("kv--put", "p1", {"key": "a", "value": "nope"}),
    ("kv--get", "g1", {"key": "${steps.1.value}"}),
]


async def check_owed(service: TransactionService, tx: Block, owed: StepsNotRedone) -> None:
    """The block rolled back naming the step it was owed; nothing was committed."""
    assert owed.steps == {1: "kv.put"}
    assert tx.status is TxStatus.ROLLED_BACK
    assert await committed_value(service, "a") is None


# ------------------------------------------------------------------ approval

PRICING: list[Call] = [("kv--put", "p1", {"key": "price", "value": 100})]


def repricing(refusal: str) -> list[Call]:
    """The price the refusal says is the limit."""
    limit = re.search(r"the limit is (\d+)", refusal)
    assert limit is not None, refusal
    return [("kv--put", "p2", {"key": "price", "value": int(limit[1])})]


async def check_approved(service: TransactionService, tx: Block, receipt_id: str) -> None:
    """The change shown (price 100) committed, under the receipt that was shown."""
    assert tx.result is not None
    assert tx.result.committed
    assert await committed_value(service, "price") == 100
    info = await service.get_transaction(tx.transaction_id)
    assert info.receipts[0].status == "approved"
    assert info.receipts[0].receipt_id == receipt_id


async def check_approved_after_a_refusal(service: TransactionService, tx: Block) -> None:
    """The refusal's reason was kept; the change made after it (price 50) committed."""
    assert [r.reason for r in tx.refusals] == ["the limit is 50, not 100"]
    assert tx.result is not None
    assert tx.result.committed
    assert await committed_value(service, "price") == 50


async def check_rolled_back_unapproved(service: TransactionService, tx: Block) -> None:
    assert tx.status is TxStatus.ROLLED_BACK
    assert await committed_value(service, "price") is None


# ------------------------------------------------------------------ a crash and a resume

# What the model answers, turn by turn: book blue; size up green (no such room: the read
# fails and is retried in place); size up red and keep the size; book red; done.
RESUMING: list[list[tuple[str, str, dict[str, Any]]]] = [
    [("book_room", "r1", {"room": "blue", "log": "LOG"})],
    [("room_size", "r2", {"room": "green"})],
    [
        ("room_size", "r3", {"room": "red"}),
        ("kv--put", "r4", {"key": "size", "value": "${steps.2}"}),
    ],
    [("book_room", "r5", {"room": "red", "log": "LOG"})],
]
CRASH_TURN = 3  # the process is killed when the model is asked for this answer (book red)
REPLAYED = 4  # the calls made before the crash, which a replay from the start makes again


def resuming(log: str, turn: int) -> list[Call] | None:
    """The model's calls at its ``turn``-th answer (0: the first); None: it is done."""
    if turn >= len(RESUMING):
        return None
    return [
        (n, i, {k: log if v == "LOG" else v for k, v in a.items()}) for n, i, a in RESUMING[turn]
    ]


def check_crashed(log: str) -> None:
    """The run died after booking blue, before booking red."""
    assert journal(log) == [("book", "blue")]


async def check_resumed(service: TransactionService, transaction_id: str, log: str) -> None:
    """Each step ran once, over both processes; blue was not booked again; it committed."""
    info = await service.get_transaction(transaction_id)
    assert info.status is TxStatus.COMMITTED
    attempts = [(s.step_id, s.tool_name, str(s.status)) for s in info.steps]
    assert attempts == [
        (1, "book_room", "SUCCESS"),
        (2, "room_size", "FAILED"),
        (2, "room_size", "SUCCESS"),
        (3, "kv.put", "SUCCESS"),
        (4, "book_room", "SUCCESS"),
    ]
    assert journal(log) == [("book", "blue"), ("book", "red")]
    assert await committed_value(service, "size") == 12


# ------------------------------------------------------------------ served


def served_booking(log: str) -> list[Call]:
    """Size up red and book it: a read, and a step the server must undo when the run raises."""
    return [
        ("room_size", "s", {"room": "red"}),
        ("book_room", "b", {"room": "red", "log": log}),
    ]


def check_the_served_undo(log: str) -> None:
    """The committed run's booking stands; the aborted run's was cancelled by the server."""
    assert journal(log) == [("book", "red"), ("book", "red"), ("cancel", "red")]


# ------------------------------------------------------------------ the engine side


def check_described(described: dict[str, dict[str, Any]]) -> None:
    """Each scenario tool as an AgentTx tool: its name, its declared effect or the default,
    its argument schema and description."""
    assert set(described) == {"book_room", "room_size", "order_lunch"}
    assert described["room_size"]["effect"] == "read"
    assert described["book_room"]["effect"] == "compensatable"
    assert described["order_lunch"]["effect"] == "irreversible"  # nobody declared it
    assert set(described["room_size"]["input_schema"]["properties"]) == {"room", "delay_s"}
    assert described["room_size"]["description"].startswith("How many people fit")


def refused_declarations(
    undo: object, not_one: str, effects: Sequence[str]
) -> list[tuple[dict[str, Any], str]]:
    """Declarations of ``book_room`` that cannot hold, and words of each refusal: ``effects``
    are classes the framework's tools cannot have (``not_one`` says whose: "a LangChain
    tool"); ``undo`` is the framework's ``cancel_room``."""
    return [
        ({"effects": {"book_room": "compensatable"}}, "needs an undo: pass undo="),
        *[({"effects": {"book_room": e}}, f"'{e}' is not one {not_one}") for e in effects],
        ({"effects": {"bok_room": "read"}}, "effects names 'bok_room', which is not among"),
        ({"undo": {"book_room": undo}}, "has an undo, so declare it compensatable"),
    ]
