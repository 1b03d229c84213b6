"""The README's examples run, twice, and print what their comments say.

Every ``python`` block of README.md that prints is run as a user would run it — a fresh
interpreter in an empty directory, the client tour against a real ``agenttx serve`` — and then
run again in the same place, since a tour that only works once teaches the wrong thing. A
``print(...)  # text`` line says what it prints: exactly ``text``, or a line starting with
it when it ends in ``…``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from server_process import start_server

README = Path(__file__).resolve().parents[2] / "README.md"
DEFAULT_TARGET = "127.0.0.1:50051"


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)


def tours() -> list[str]:
    return [block for block in code_blocks("python") if "print(" in block]


def promised(block: str) -> list[str]:
    """What the block's ``print`` lines say they print, in order."""
    return [
        m.group(1).strip()
        for line in block.splitlines()
        if (m := re.search(r"\bprint\(.*\)\s+#\s(.+)$", line))
    ]


def run(code: str, cwd: Path) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def assert_prints_what_it_says(block: str, printed: list[str]) -> None:
    expected = promised(block)
    assert len(printed) == len(expected), printed
    for line, says in zip(printed, expected, strict=True):
        if says.endswith("…"):
            assert line.startswith(says.removesuffix("…").rstrip()), (line, says)
        else:
            assert line == says


def test_the_first_two_commands_stay_make_run_and_make_test() -> None:
    first = code_blocks("sh")[0].splitlines()
    assert first[0].startswith("make run    # ")
    assert first[1].startswith("make test   # ")


def test_the_readme_has_an_embedded_and_a_client_tour_that_say_what_they_print() -> None:
    embedded, client = tours()
    assert "agenttx.Engine.open" in embedded
    assert DEFAULT_TARGET in client
    assert "tx.run(agent)" in client  # the resume loop is shown
    assert len(promised(embedded)) == 3
    assert len(promised(client)) == 2
    assert "exactly-once" not in README.read_text()
    assert "at-least-once delivery" in README.read_text()


def test_the_embedded_tour_runs_twice(tmp_path: Path) -> None:
    [embedded] = [t for t in tours() if "agenttx.Engine.open" in t]
    for _ in range(2):
        assert_prints_what_it_says(embedded, run(embedded, tmp_path))


def test_the_client_tour_runs_twice_against_a_real_server(tmp_path: Path) -> None:
    [client] = [t for t in tours() if DEFAULT_TARGET in t]
    server = start_server(tmp_path / "data", env={"AGENTTX_METRICS_ADDR": "off"})
    try:
        code = client.replace(DEFAULT_TARGET, server.address)
        for _ in range(2):
            assert_prints_what_it_says(client, run(code, tmp_path))
    finally:
        server.terminate()
