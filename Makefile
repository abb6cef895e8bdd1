# The converse stage of Mira. `make run` and `make test` are the two commands a newcomer needs.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint unit integration bench clean localstack localstack-host

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
	$(BIN)/lint-imports
	$(BIN)/cfn-lint infra/cloudformation/*.yaml

# What CI runs (.ci/run is `CI=true make test`): the lint, then every test, LocalStack's
# included (installed first; without it CI=true fails the LocalStack tests, a hand-run
# pytest skips them and says why).
test: lint localstack-host
	$(BIN)/pytest

unit: install
	$(BIN)/pytest tests/unit

integration: install localstack-host
	$(BIN)/pytest tests/integration

bench: install
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.run_all
	# The fault tests' figures (kill -9, outage): duplicates and losses per run.
	$(BIN)/pytest -q -p no:cacheprovider tests/integration/test_reliability.py --reliability-figures

# LocalStack's own SQS and S3 on the host (no Docker), for the second-implementation tests.
# localstack-core 4.7.0 is the newest line whose SQS runs on Python 3.11 (4.14 declares 3.10
# but its SQS uses 3.12 syntax; the 2026.x line needs 3.13). Its DynamoDB needs a download
# at start-up, so the tests keep the history table on moto.
LOCALSTACK_VENV := .localstack/venv
LOCALSTACK_PINS := 'localstack-core[runtime]==4.7.0' 'cbor2<6' 'pyopenssl<25' 'cryptography<45' service_identity

localstack-host: $(LOCALSTACK_VENV)/.installed

$(LOCALSTACK_VENV)/.installed:
	test -x $(LOCALSTACK_VENV)/bin/python || $(PYTHON) -m venv $(LOCALSTACK_VENV)
	$(LOCALSTACK_VENV)/bin/python -m pip install --quiet $(LOCALSTACK_PINS)
	@touch $@

# The compose file needs a Docker engine; machines without one use `make run` (moto) and the
# host LocalStack above.
localstack:
	@if docker info >/dev/null 2>&1; then docker compose -f localstack.yml up --build; \
	else echo "No Docker engine: 'docker compose -f localstack.yml up --build' runs LocalStack,"; \
	echo "bootstraps it with 'worker bootstrap' and starts the worker where Docker exists."; \
	echo "Here, 'make run' runs the stage on moto; 'make test' installs LocalStack's SQS and"; \
	echo "S3 on the host ('make localstack-host') and runs the LocalStack tests against them."; fi

clean:
	rm -rf $(VENV) .localstack .pytest_cache .mypy_cache .ruff_cache .hypothesis
