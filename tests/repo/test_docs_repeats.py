"""No page of README.md, docs/ or the benchmarks' detail pages (``benchmarks/results/*.md``) says
the same thing twice.

Parallel branches each add a paragraph, a table row or a sentence, and a merge keeps both:
the reader then gets two versions, often disagreeing (two rows for one engine part, one
sentence continued twice). Three checks find what such merges leave, in linear time:

- a run of ``RUN_WORDS`` or more words that appears twice in one page's prose (fenced blocks
  and tables left out): a sentence or paragraph kept twice, even when the copies end
  differently;
- two rows of one table with the same first cell that say nearly the same (most of one row's
  words are in the other): a row kept in its old and its new form;
- two entries of one plain listing (a fenced block without a language, lines of a name, two
  spaces and what it is) with the same name that say nearly the same.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    # the detail pages docs/benchmarks.md summarises, held to the same rules
    *sorted((ROOT / "benchmarks" / "results").glob("*.md")),
]
RUN_WORDS = 12
FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```[^\n]*$", re.MULTILINE | re.DOTALL)
LISTING = re.compile(r"^```\n(.*?)^[ \t]*```[^\n]*$", re.MULTILINE | re.DOTALL)
ENTRY = re.compile(r"^(\S+)\s{2,}\S")
NOT_RUN = re.compile(r"^\*Not run: .+\*$")
WORD = re.compile(r"[\w`.-]+")


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _prose(text: str) -> str:
    without_code = FENCE.sub("", text)
    lines = without_code.splitlines()
    # Tables are checked row by row; the "*Not run: …*" captions of examples
    # (tests/repo/test_docs_examples.py) may well give the same reason twice.
    return "\n".join(
        line
        for line in lines
        if not line.lstrip().startswith("|") and not NOT_RUN.match(line.strip())
    )


def repeated_runs(text: str) -> list[str]:
    """Each run of at least ``RUN_WORDS`` words that occurs twice in ``text``'s prose."""
    words = WORD.findall(_prose(text).lower())
    first_at: dict[tuple[str, ...], int] = {}
    runs: list[str] = []
    last_hit = -2
    for i in range(len(words) - RUN_WORDS + 1):
        gram = tuple(words[i : i + RUN_WORDS])
        seen = first_at.setdefault(gram, i)
        # A repeat must not overlap its first occurrence ("a a a a ..." is one run, not two).
        if seen != i and i - seen >= RUN_WORDS:
            if i != last_hit + 1:  # one report per repeated stretch
                runs.append(" ".join(gram))
            last_hit = i
    return runs


def _tables(text: str) -> list[list[list[str]]]:
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in FENCE.sub("", text).splitlines():
        if line.lstrip().startswith("|"):
            if current is None:
                current = []
                tables.append(current)
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        else:
            current = None
    return tables


def _near(a: str, b: str) -> bool:
    wa, wb = set(WORD.findall(a.lower())), set(WORD.findall(b.lower()))
    contained = len(wa & wb) / max(1, min(len(wa), len(wb)))
    return contained >= 0.9 or difflib.SequenceMatcher(None, a, b).ratio() >= 0.7


def repeated_rows(text: str) -> list[str]:
    """Rows of one table with the same first cell that say nearly the same thing."""
    found: list[str] = []
    for table in _tables(text):
        by_key: dict[str, list[str]] = {}
        for cells in table:
            key = cells[0]
            if not key or set(key) <= set("-: "):
                continue
            row = " | ".join(cells)
            if any(_near(row, other) for other in by_key.get(key, [])):
                found.append(row[:120])
            by_key.setdefault(key, []).append(row)
    return found


def repeated_listing_lines(text: str) -> list[str]:
    """Entries of one plain listing with the same name that say nearly the same."""
    found: list[str] = []
    for block in LISTING.findall(text):
        by_name: dict[str, list[str]] = {}
        for line in block.splitlines():
            if not (entry := ENTRY.match(line)):
                continue
            name = entry.group(1)
            if any(_near(line, other) for other in by_name.get(name, [])):
                found.append(line[:120])
            by_name.setdefault(name, []).append(line)
    return found


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_no_sentence_or_paragraph_is_said_twice(page: Path) -> None:
    assert repeated_runs(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_no_table_row_is_kept_in_two_versions(page: Path) -> None:
    assert repeated_rows(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_no_listing_names_an_entry_twice(page: Path) -> None:
    assert repeated_listing_lines(page.read_text()) == []


def test_the_checks_find_what_a_merge_leaves() -> None:
    sentence = "the server drives a running agenttx serve instead of embedding an engine of its own"
    assert repeated_runs(f"{sentence}, and more.\n{sentence}.\n") != []
    assert repeated_runs("one two three four five six seven eight nine ten eleven twelve\n") == []
    table = (
        "| part | module | what |\n|---|---|---|\n"
        "| `Recovery` | `core/recovery.py` | finishes crashed rewinds, reaps idle transactions |\n"
        "| `Other` | `core/other.py` | something else entirely |\n"
        "| `Recovery` | `core/recovery.py` | finishes crashed rewinds, settles outcomes, reaps "
        "idle transactions |\n"
    )
    assert len(repeated_rows(table)) == 1
    distinct = (
        "| m | n |\n|---|---|\n"
        "| `StepRecord` | 9 `error_category` |\n| `StepRecord` | 20 `elided` fields |\n"
    )
    assert repeated_rows(distinct) == []
    listing = (
        "```\nclient      speaks the wire protocol only (wire, types)\n"
        "client      speaks the wire protocol only (wire, types, audit)\n```\n"
    )
    assert len(repeated_listing_lines(listing)) == 1
