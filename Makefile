# Two commands matter: `make run` serves AgentTx, `make test` runs the whole suite.
# Both create .venv from the lock file first, so a fresh clone needs only Python 3.11+.
# pytest includes tests/repo/test_package.py: the wheel built, installed in a fresh venv and
# smoke-tested.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest demo bench clean proto sync-client

PROTO_OUT := src/agenttx/wire/agenttx_pb2.py

$(STAMP): requirements.lock pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

# The generated gRPC code in src/agenttx/wire/ is committed (docs/packaging.md), so nothing
# below needs it made. After editing the .proto, `make proto` regenerates it; `make test`
# fails while the committed code and the .proto disagree.
$(PROTO_OUT): proto/agenttx/v1/agenttx.proto scripts/gen_proto.py | $(STAMP)
	$(BIN)/python scripts/gen_proto.py

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

# The blocking client, src/agenttx/client/_sync.py, is generated from the asyncio one and
# committed (docs/packaging.md). After editing _async.py, `make sync-client` regenerates it;
# `make test` fails while the two disagree.
sync-client: $(STAMP)
	$(BIN)/python scripts/gen_sync_client.py

# gRPC on 127.0.0.1:50051, SQLite in ./agenttx-data, metrics on 127.0.0.1:9464/metrics.
run: $(STAMP)
	$(BIN)/agenttx serve

demo: $(STAMP)
	$(BIN)/agenttx demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks scripts examples
	$(BIN)/ruff format --check src tests benchmarks scripts examples

typecheck: $(STAMP)
	$(BIN)/mypy

# Two passes (docs/testing.md): the test files spread over TEST_WORKERS processes, each file's
# tests together in one; then the tests marked `serial`, which measure time, on a quiet machine.
TEST_WORKERS ?= 2

pytest: $(STAMP)
	$(BIN)/pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile -m "not serial"
	$(BIN)/pytest -q --durations=5 -m serial

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks.engine

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build dist src/*.egg-info
