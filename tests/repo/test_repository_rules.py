"""Rules of the repository that keep tests and benchmarks easy to carry on, checked on the
files themselves: tests never import ``benchmarks``; ``benchmarks/results/`` holds one file
per benchmark (and one ``ab_<module>.json`` per benchmark compared across two revisions by
``benchmarks/ab.py``), beside it at most one ``<result>.md`` page of its detail (what
docs/benchmarks.md summarises), with no machine-local path; ``docs/`` and those pages cite code
by name, never by line number.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
# The benchmarks that write results, each to its one file (docs/benchmarks.md summarises them;
# the detail of each is a Markdown page named after one of these files).
RESULT_FILES = {
    "audit.json",
    "auth_tls.json",
    "engine.json",
    "engine_whatif.json",
    "gateway.json",
    "grpc.json",
    "grpc-inprocess.json",
    "hints.json",
    "history.json",
    "integrations.json",
    "mcp.json",
    "peers.json",
    "preview.json",
    "recovery.json",
    "replicas.json",
    "run_floor.json",
    "surfaces.json",
}
# benchmarks/ab.py's result for benchmarks/<module>.py, run at two revisions.
AB_RESULT = re.compile(r"ab_(\w+)\.json")
# A directory only this machine has: the work tree, temporary files, a home directory.
MACHINE_LOCAL = re.compile(r"(?:^|[\s\"'(=])(/work/|/tmp/|/var/folders/|/home/|/root/|/Users/)")
# `store/sqlite.py:123`, `engine.py:12,40`, `logs.py:44–60`: a file cited by line.
LINE_REFERENCE = re.compile(r"\b[\w/.-]+\.(?:py|proto|toml|rs):\d+")


def python_files(*dirs: str) -> Iterator[Path]:
    for d in dirs:
        yield from (REPO / d).rglob("*.py")


def imported_modules(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, str):
        yield value


def test_tests_never_import_benchmarks() -> None:
    offenders = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in python_files("tests")
        for module in imported_modules(path)
        if module.split(".")[0] == "benchmarks"
    ]
    assert not offenders


def test_no_layer_folder_of_tests_shadows_the_shared_conftest() -> None:
    # tests/conftest.py puts every layer folder on the import path, so a folder's own
    # conftest.py, unless the folder is a package, would be the ``conftest`` that
    # ``from conftest import FakeClock`` finds in whichever worker imported it first.
    tests = REPO / "tests"
    shadowing = [
        str(path.relative_to(REPO))
        for path in tests.glob("*/conftest.py")
        if not (path.parent / "__init__.py").exists()
    ]
    assert not shadowing, (
        f"move these into tests/conftest.py or make the folder a package: {shadowing}"
    )


def ab_result_files() -> set[str]:
    return {p.name for p in RESULTS.iterdir() if AB_RESULT.fullmatch(p.name)}


def detail_pages() -> set[str]:
    return {p.name for p in RESULTS.iterdir() if p.suffix == ".md"}


def test_results_hold_one_file_per_benchmark() -> None:
    assert {p.name for p in RESULTS.iterdir()} - ab_result_files() - detail_pages() == RESULT_FILES


def test_a_detail_page_is_named_after_a_result() -> None:
    # benchmarks/results/<name>.md holds the detail of <name>.json: no page without its result.
    results = RESULT_FILES | ab_result_files()
    orphans = sorted(name for name in detail_pages() if f"{name[:-3]}.json" not in results)
    assert not orphans


def test_the_summary_links_to_every_detail_page() -> None:
    summary = (REPO / "docs" / "benchmarks.md").read_text()
    unlinked = sorted(
        name for name in detail_pages() if f"](../benchmarks/results/{name}" not in summary
    )
    assert not unlinked


def test_an_ab_result_names_a_benchmark_module() -> None:
    # ab_<module>.json is one file per compared benchmark: <module> must be a benchmark.
    modules = {name: AB_RESULT.fullmatch(name) for name in ab_result_files()}
    orphans = [
        name
        for name, match in sorted(modules.items())
        if match is None or not (REPO / "benchmarks" / f"{match[1]}.py").exists()
    ]
    assert not orphans


@pytest.mark.parametrize("name", sorted(RESULT_FILES | ab_result_files() | detail_pages()))
def test_a_result_names_no_machine_local_path(name: str) -> None:
    text = (RESULTS / name).read_text()
    found = strings(json.loads(text)) if name.endswith(".json") else iter(text.splitlines())
    local = sorted({s for s in found if MACHINE_LOCAL.search(s)})
    assert not local, f"{name}: {local[:5]}"


def test_docs_cite_code_by_name_not_by_line() -> None:
    pages = [
        *sorted((REPO / "docs").glob("*.md")),
        REPO / "README.md",
        *sorted(RESULTS.glob("*.md")),
    ]
    cited = [
        f"{page.name}: {hit}"
        for page in pages
        if page.exists()
        for hit in LINE_REFERENCE.findall(page.read_text())
    ]
    assert not cited
