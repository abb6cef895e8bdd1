# The converse stage of Mira. `make run` and `make test` are the two commands a newcomer needs.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint unit integration bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: install
	$(BIN)/worker demo

lint: install
	$(BIN)/ruff check worker tests bench
	$(BIN)/ruff format --check worker tests bench
	$(BIN)/mypy
	$(BIN)/cfn-lint infra/cloudformation/*.yaml

test: lint
	$(BIN)/pytest

unit: install
	$(BIN)/pytest tests/unit

integration: install
	$(BIN)/pytest tests/integration

bench: install
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.window_bench
	$(BIN)/python -m bench.compare_trim_messages

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
