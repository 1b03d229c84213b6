"""The redaction pre-check (``Redactor.may_hold``) of a large value never holds the event loop.

Every step's arguments and output pass a needle test before anything is stored: does the text
hold a secret-looking name or token at all? On a 1 MiB argument or a 3 MB ``fs.read`` output it
used to run inline on the event loop, as one scan of the whole text per needle and one regex
scan that tried seven words at every position — 0.5-1.9 s in which no other client was
answered (measured over gRPC on this machine: a ``ListTools`` waited 1.7 s behind one
``fs.read``). Now a large text is tested on a worker thread, in slices short enough that the
loop gets the interpreter between them, with a regex that skips straight to each "key".

What is checked here: the sliced test finds exactly what a whole-text test finds (at every
slice boundary, in any case), and the engine calls it on a large text only off the loop
thread — for a successful step's arguments and output, and for a step that fails before its
arguments were masked. Both stores.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agenttx
from agenttx.core import masking
from agenttx.core.masking import SCAN_SLICE, Redactor
from agenttx.core.offload import INLINE_JSON_CHARS

PAIR_WORDS = ("api", "private", "access", "secret", "signing", "session", "auth")
SEPARATORS = ("", "-", "_", ".", " ")


def whole_text_may_hold(text: str) -> bool:
    """The definition: a needle, or a secret key pair, anywhere in the lowercased text."""
    low = text.lower()
    pair = re.compile(r"(?:api|private|access|secret|signing|session|auth)[-_. ]?key")
    return any(n in low for n in masking._NEEDLES) or pair.search(low) is not None


MARKS = (
    *masking._NEEDLES,
    *(f"{w}{s}key" for w in PAIR_WORDS for s in SEPARATORS),
    "API_KEY",
    "Signing Key",
    "X-Access-Key",
    "PassWord",
)


@pytest.mark.parametrize("filler", ["a", "x", "k", "ke"])
@pytest.mark.parametrize("mark", MARKS)
def test_a_mark_is_found_wherever_it_falls_against_a_slice_boundary(mark: str, filler: str) -> None:
    redactor = Redactor()
    for boundary in (SCAN_SLICE, 2 * SCAN_SLICE):
        for start in range(boundary - len(mark) - 1, boundary + 2):
            head = (filler * start)[:start]
            text = head + mark + filler * 40
            assert redactor.may_hold(text) == whole_text_may_hold(text), (mark, start)
    clean = filler * (3 * SCAN_SLICE + 7)
    assert redactor.may_hold(clean) is whole_text_may_hold(clean) is False


@pytest.mark.parametrize("mark", MARKS)
def test_a_short_text_tested_by_one_regex_finds_every_mark(mark: str) -> None:
    # Up to SHORT_SCAN_CHARS a text is tested by one regex, not the substring tests.
    redactor = Redactor()
    for text in (mark, f'{{"k":"{mark}"}}', f"a{mark}b" + "x" * (masking.SHORT_SCAN_CHARS - 30)):
        assert len(text) <= masking.SHORT_SCAN_CHARS
        assert redactor.may_hold(text) is whole_text_may_hold(text) is True, text
    for clean in ('{"key":"w1/k1","value":1}', "k" * masking.SHORT_SCAN_CHARS, "ke y" * 9):
        assert redactor.may_hold(clean) is whole_text_may_hold(clean) is False, clean


FRAGMENTS = st.sampled_from(
    ["a", "x", "k", "e", "y", "key", "api", "acces", "s", "-", "_", ".", " ", "pas", "to", "gh"]
)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(FRAGMENTS, max_size=40), repeat=st.integers(1, 12_000))
def test_the_sliced_test_agrees_with_a_whole_text_scan(pieces: list[str], repeat: int) -> None:
    # Repetition makes texts that span several slices, with a fragment cut at each boundary.
    text = "".join(pieces) * repeat if pieces else ""
    assert Redactor().may_hold(text) == whole_text_may_hold(text)


def test_configured_patterns_still_send_every_text_to_the_walk() -> None:
    assert Redactor(["internal_.*"]).may_hold("x" * (SCAN_SLICE * 2))


class Recorder:
    """Wraps an engine's ``Redactor.may_hold``, noting the size of each text it is given and
    whether it ran on the event loop's thread."""

    def __init__(self, redactor: Redactor) -> None:
        self.loop_thread = threading.get_ident()
        self.calls: list[tuple[int, bool]] = []
        original = redactor.may_hold

        def may_hold(text: str) -> bool:
            self.calls.append((len(text), threading.get_ident() == self.loop_thread))
            return original(text)

        redactor.may_hold = may_hold  # type: ignore[method-assign]

    def large_on_loop(self) -> list[int]:
        return [size for size, on_loop in self.calls if on_loop and size > INLINE_JSON_CHARS]

    def large(self) -> list[int]:
        return [size for size, _ in self.calls if size > INLINE_JSON_CHARS]


def one_mib_argument(value: str = "a") -> str:
    n = (1 << 20) - 100  # under the 1 MiB argument limit with a longer first field
    return '{"key": "k", "value": "%s"}' % (value * n)


async def test_a_large_argument_and_output_are_tested_off_the_loop(
    open_engine: Any, tmp_path: Path
) -> None:
    engine: agenttx.Engine = await open_engine(background=False)
    recorder = Recorder(engine.redactor)
    files = tmp_path / "files"
    files.mkdir(exist_ok=True)
    (files / "big.txt").write_text("a" * 3_000_000)
    tx = (await engine.begin(agent_id="scan")).transaction_id

    put = await engine.execute_step(tx, 1, "kv.put", one_mib_argument())
    assert put.status is agenttx.StepStatus.SUCCESS, put.clean_hint
    read = await engine.execute_step(tx, 2, "fs.read", {"path": "big.txt"})
    assert read.status is agenttx.StepStatus.SUCCESS, read.clean_hint
    assert len(read.output["contents"]) == 3_000_000

    assert recorder.large(), "the large texts were tested"
    assert recorder.large_on_loop() == []


async def test_a_large_argument_of_a_step_failing_early_is_masked_off_the_loop(
    open_engine: Any,
) -> None:
    engine: agenttx.Engine = await open_engine(background=False)
    recorder = Recorder(engine.redactor)
    tx = (await engine.begin(agent_id="scan")).transaction_id
    secret = "hunter2-hunter2"
    big = one_mib_argument().replace('"key": "k"', f'"password": "{secret}"')

    # An unknown tool fails before the arguments are masked on the way to a tool.
    failed = await engine.execute_step(tx, 1, "no.such_tool", big)
    assert failed.status is agenttx.StepStatus.ROLLBACK_TRIGGERED
    assert recorder.large(), "the large text was tested"
    assert recorder.large_on_loop() == []
    # And what the failed attempt keeps is still masked.
    info = await engine.get_transaction(tx)
    [attempt] = [s for s in info.steps if s.step_id == 1]
    assert secret not in str(attempt.arguments)
    assert attempt.arguments["password"] == masking.MASK
