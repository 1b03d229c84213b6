"""Each framework is an extra: ``import agenttx`` and ``import agenttx.integrations`` load
none, and a framework module imported without its extra fails at once, naming it. Run in a
fresh interpreter in which the framework cannot be imported (``sys.modules[name] = None``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from paths import ROOT

FRAMEWORKS = ("langgraph", "langchain_core", "agents", "pydantic_ai", "openai")


def fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_core_and_the_package_load_no_framework() -> None:
    done = fresh(
        """
        import json, sys
        import agenttx, agenttx.integrations
        print(json.dumps(sorted(sys.modules)))
        """
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert [m for m in loaded if m.split(".")[0] in FRAMEWORKS] == []


@pytest.mark.parametrize(
    ("module", "blocked", "extra", "needs"),
    [
        ("langgraph", "langgraph", "langgraph", "needs LangGraph and LangChain"),
        ("langgraph", "langchain_core", "langgraph", "needs LangGraph and LangChain"),
        ("openai_agents", "agents", "openai-agents", "needs the OpenAI Agents SDK"),
        ("pydantic_ai", "pydantic_ai", "pydantic-ai", "needs pydantic-ai"),
    ],
)
def test_a_framework_module_without_its_extra_names_the_extra(
    module: str, blocked: str, extra: str, needs: str
) -> None:
    done = fresh(
        f"""
        import sys
        sys.modules[{blocked!r}] = None  # as if the extra were not installed
        import agenttx.integrations
        try:
            import agenttx.integrations.{module}
        except ImportError as e:
            print(e)
        else:
            raise SystemExit("imported without the framework")
        """
    )
    assert done.returncode == 0, done.stderr
    assert f"pip install 'agenttx[{extra}]'" in done.stdout
    assert needs in done.stdout


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_framework_suite_without_its_extra_skips_naming_it_except_in_ci(
    ci: str, tmp_path: Path
) -> None:
    """Where the extra is not installed the suite is skipped with the extra to install; under
    ``CI=true`` the same is a collection error (the frameworks' tests never skip in CI)."""
    missing = tmp_path / "agents"  # stands in front of the SDK: importing it fails as absent
    missing.mkdir()
    (missing / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'agents'\", name='agents')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(tmp_path), CI=ci)
    suite = Path(__file__).with_name("test_openai_agents_tools.py")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(suite)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    if ci:
        assert done.returncode == 2, done.stdout  # the import error, as it is
        assert "No module named 'agents'" in done.stdout
    else:
        assert done.returncode == 5, done.stdout  # nothing collected, and no error
        assert "the openai-agents extra is not installed" in done.stdout
        assert "1 skipped" in done.stdout
