"""The JSON policy's pre-scan is linear in its input, whatever the text holds.

Every arguments text and tool output over 128 characters is scanned for what could break a
rule besides depth (a surrogate escape, a run of more than 100 digits) before it is walked.
That scan was the regex ``\\u[dD][89a-fA-F]|[0-9]{101}``, which restarts at each digit of a
run and reads the run again: 1 MiB of "99 digits and a letter", repeated, cost 154 ms of CPU
in one C call, holding the interpreter (and so the event loop, from any thread); 64 KiB of
it, parsed inline on the loop, ~10 ms. The scan now finds digit runs with one
``bytes.translate`` and a substring search, slice by slice.

Checked: it finds exactly what the regex found (at slice boundaries too, and under
hypothesis), texts that break a rule are still refused naming it, and adversarial 1 MiB
texts built from the scan's own tokens cost a bounded, small amount of CPU each.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttx import jsonpolicy
from agenttx.jsonpolicy import MAX_INT_DIGITS, JsonRefused

pytestmark = pytest.mark.serial  # measures time: runs alone, after the parallel run (conftest.py)

DEFINITION = re.compile(r"\\u[dD][89a-fA-F]|[0-9]{" + str(MAX_INT_DIGITS + 1) + "}")
SLICE = jsonpolicy._SCAN_SLICE


def regex_says(text: str) -> bool:
    return DEFINITION.search(text) is not None


@pytest.mark.parametrize(
    "mark",
    ["1" * (MAX_INT_DIGITS + 1), "9" * 5000, "\\ud800", "\\uDFFF", "\\uDa00", "\\udc00"],
)
def test_a_mark_is_found_wherever_it_falls_against_a_slice_boundary(mark: str) -> None:
    for boundary in (SLICE, 2 * SLICE):
        # The mark ending just before, at and after the boundary, and starting around it.
        ends = range(boundary - len(mark) - 3, boundary - len(mark) + 4)
        for start in (*ends, *range(boundary - 3, boundary + 4), boundary - len(mark) // 2):
            text = "x" * start + mark + "x" * 10
            assert jsonpolicy._suspect(text) is regex_says(text) is True, start


@pytest.mark.parametrize(
    "near_miss",
    ["1" * MAX_INT_DIGITS + "x", "\\ud7ff", "\\uc800", "\\\\u", "٣" * 200, "\\u"],
)
def test_near_misses_are_not_suspect(near_miss: str) -> None:
    text = near_miss * (3 * SLICE // len(near_miss) + 1)
    assert jsonpolicy._suspect(text) is regex_says(text) is False


TOKENS = st.sampled_from(["1", "9", "x", "\\u", "\\", "d", "D", "8", "c", "f", "é", " ", '"'])


@settings(max_examples=150, deadline=None)
@given(
    pieces=st.lists(TOKENS, max_size=60), repeat=st.integers(1, 9000), digits=st.integers(0, 120)
)
def test_the_scan_agrees_with_the_regex(pieces: list[str], repeat: int, digits: int) -> None:
    text = ("".join(pieces) + "1" * digits) * repeat
    assert jsonpolicy._suspect(text) is regex_says(text)


def test_what_the_scan_finds_is_still_refused_naming_the_rule() -> None:
    padding = "x" * (SLICE + 50)
    with pytest.raises(JsonRefused) as digits:
        jsonpolicy.parse(json.dumps({"pad": padding, "n": 0}).replace("0}", "1" * 200 + "}"))
    assert digits.value.rule == "json_integer_digits"
    with pytest.raises(JsonRefused) as surrogate:
        jsonpolicy.parse('{"pad": "' + padding + '", "s": "\\ud800"}')
    assert surrogate.value.rule == "json_utf8"
    # A long digit run inside a string is no integer: accepted, after a walk finding nothing.
    text = json.dumps({"pad": padding, "s": "7" * 5000})
    assert jsonpolicy.parse(text)["s"] == "7" * 5000


ADVERSARIAL = {
    "99 digits and a letter": ("1" * (MAX_INT_DIGITS - 1) + "x"),
    "digit, letter": "1x",
    "backslash-u": "\\u",
    "backslash-u-d": "\\ud",
    "backslashes": "\\",
    "non-ASCII": "é",
    "digits and spaces": "12345 ",
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_a_1_mib_adversarial_text_costs_little_cpu(name: str) -> None:
    unit = ADVERSARIAL[name]
    text = (unit * ((1 << 20) // len(unit) + 1))[: 1 << 20]
    best = float("inf")
    for _ in range(3):  # CPU time, not wall time: other processes on the machine do not count
        start = time.process_time()
        found = jsonpolicy._suspect(text)
        best = min(best, time.process_time() - start)
    assert found is regex_says(text)
    # The regex took 29-154 ms of CPU on these; the scan 2-16 ms.
    assert best < 0.06, f"{best * 1000:.1f} ms of CPU for 1 MiB"
