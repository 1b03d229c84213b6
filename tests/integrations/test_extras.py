"""Each framework is an extra: ``import agenttx`` and ``import agenttx.integrations`` load
none, and a framework module imported without its extra fails at once, naming it. Run in a
fresh interpreter in which the framework cannot be imported (``sys.modules[name] = None``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

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
