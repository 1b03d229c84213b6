# Two commands matter: `make run` serves AgentTx, `make test` runs the whole suite.
# Both create .venv from the lock file first, so a fresh clone needs only Python 3.11+.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest demo bench clean

$(STAMP): requirements.lock pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/agenttx demo

demo: run

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks.engine

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
