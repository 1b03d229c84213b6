"""Loading tools: by module name (the working directory or PYTHONPATH on the import path) or
by file path, and a module that fails to import is one ``Error:`` line naming the cause and
where it was raised — never the traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agenttx import InvalidArgument
from agenttx.tools.registry import load_tools

GOOD = """\
import agenttx
from helpers import greeting

@agenttx.tool(name="file.hello")
def hello(name: str) -> str:
    return greeting(name)

TOOLS = [hello]
"""


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    d = tmp_path / "agent"
    d.mkdir()
    (d / "helpers.py").write_text("def greeting(name):\n    return 'hi ' + name\n")
    (d / "hc_good_tools.py").write_text(GOOD)
    (d / "hc_zero_tools.py").write_text("import agenttx\n\nRATE = 1 / 0\n")
    (d / "hc_syntax_tools.py").write_text("def broken(:\n    pass\n")
    (d / "hc_dep_tools.py").write_text("import agenttx\nimport hc_not_installed_dep\n")
    return d


async def test_a_file_path_loads_its_tools_and_its_neighbours(tools_dir: Path) -> None:
    [hello] = load_tools(str(tools_dir / "hc_good_tools.py"))
    assert hello.name == "file.hello"
    assert await hello("Ada") == "hi Ada"
    assert [t.name for t in load_tools(f"{tools_dir / 'hc_good_tools.py'}:TOOLS")] == ["file.hello"]


@pytest.mark.parametrize(
    ("module", "says"),
    [
        ("hc_zero_tools", "ZeroDivisionError: division by zero"),
        ("hc_syntax_tools", "SyntaxError: invalid syntax"),
        ("hc_dep_tools", "No module named 'hc_not_installed_dep'"),
    ],
)
def test_a_module_that_fails_to_import_names_the_cause_and_the_line(
    tools_dir: Path, monkeypatch: pytest.MonkeyPatch, module: str, says: str
) -> None:
    monkeypatch.syspath_prepend(str(tools_dir))
    for spec in (module, str(tools_dir / f"{module}.py")):
        with pytest.raises(InvalidArgument) as caught:
            load_tools(spec)
        text = caught.value.message
        assert says in text
        assert f"{module}.py, line " in text
        assert "\n" not in text
    assert module not in sys.modules  # a failed import leaves nothing half-loaded


def test_a_module_not_on_the_import_path_says_how_to_load_it() -> None:
    with pytest.raises(InvalidArgument) as caught:
        load_tools("hc_nowhere_tools")
    assert "PYTHONPATH" in caught.value.message
    assert "--tools ./my_tools.py" in caught.value.message
    with pytest.raises(InvalidArgument, match="does not exist"):
        load_tools("./hc_nowhere_tools.py")


def _serve(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    agenttx_bin = Path(sys.executable).parent / "agenttx"
    return subprocess.run(
        [
            str(agenttx_bin),
            "serve",
            "--data-dir",
            str(cwd / "data"),
            "--metrics-addr",
            "off",
            "--listen-addr",
            "127.0.0.1:0",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_serve_with_a_broken_tools_module_prints_one_error_line(tools_dir: Path) -> None:
    result = _serve(tools_dir, "--tools", "hc_zero_tools")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: --tools hc_zero_tools: cannot import tools module")
    assert "ZeroDivisionError: division by zero" in lines[0]
    assert "Traceback" not in result.stderr
