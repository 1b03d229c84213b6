# Two commands matter: `make run` serves AgentTx, `make test` runs the whole suite.
# Both create .venv from the lock file first, so a fresh clone needs only Python 3.11+.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest demo bench clean proto

PROTO_OUT := src/agenttx/wire/agenttx_pb2.py

$(STAMP): requirements.lock pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

# Generated gRPC code is made by the build from the wire contract, never edited by hand.
$(PROTO_OUT): proto/agenttx/v1/agenttx.proto scripts/gen_proto.py $(STAMP)
	$(BIN)/python scripts/gen_proto.py

proto: $(PROTO_OUT)

# gRPC on 127.0.0.1:50051, SQLite in ./agenttx-data, metrics on 127.0.0.1:9464/metrics.
run: $(STAMP) $(PROTO_OUT)
	$(BIN)/agenttx serve

demo: $(STAMP) $(PROTO_OUT)
	$(BIN)/agenttx demo

lint: $(STAMP) $(PROTO_OUT)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP) $(PROTO_OUT)
	$(BIN)/mypy

pytest: $(STAMP) $(PROTO_OUT)
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(STAMP) $(PROTO_OUT)
	$(BIN)/python -m benchmarks.engine

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache src/agenttx/wire/*_pb2*
