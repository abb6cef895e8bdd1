"""The container image and the LocalStack compose file: SIGTERM reaches the worker, it runs as
a non-root user, only 127.0.0.1 is bound, and the worker is pointed at exactly what
``worker bootstrap`` creates."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from typing import Any

import pytest
import yaml

from tests.infra.cfn_yaml import REPO_ROOT
from tests.infra.stopping import kill_after_seconds
from worker.app.resources import Resources
from worker.settings import Settings

DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
COMPOSE_FILE = REPO_ROOT / "localstack.yml"
#: LocalStack's default account, in the queue URLs it returns.
LOCALSTACK_ACCOUNT = "000000000000"
LOCALSTACK_ENDPOINT = "http://localstack:4566"
#: The licence files pyproject.toml's license-files names: the build needs them in the image.
LICENSE_FILES = tuple(
    tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "license-files"
    ]
)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, arguments = line.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def arguments_of(keyword: str) -> list[str]:
    return [arguments for name, arguments in dockerfile_instructions() if name == keyword]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(compose["services"][name])


def seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in sorted(units, key=len, reverse=True):
        if duration.endswith(unit):
            return float(duration.removesuffix(unit)) * units[unit]
    return float(duration)


# ---------------------------------------------------------------------------- Dockerfile


def test_the_image_is_built_on_python_3_11_slim() -> None:
    """A patch release of 3.11 on slim Debian (test_reproducible_build.py pins the rest)."""
    (base,) = arguments_of("FROM")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base.split()[0])


def test_the_worker_runs_as_a_non_root_user() -> None:
    users = arguments_of("USER")
    assert users, "the image must switch away from root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert user.isdigit(), "a numeric uid lets Kubernetes verify runAsNonRoot"


def test_the_entrypoint_is_the_worker_console_script_in_exec_form() -> None:
    """Exec form makes the worker PID 1, so SIGTERM reaches it and starts the drain."""
    (entrypoint,) = arguments_of("ENTRYPOINT")
    (command,) = arguments_of("CMD")
    assert json.loads(entrypoint) == ["worker"]
    assert json.loads(command) == ["run"]
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "scripts"
    ]
    assert "worker" in scripts


def test_the_image_writes_emf_metrics_unless_told_otherwise() -> None:
    """``METRICS`` is off for a developer's `worker run` and `make run`; the image turns it
    on, so any platform running the container gets the metrics."""
    env = dict(pair.split("=", 1) for line in arguments_of("ENV") for pair in shlex.split(line))
    assert env["METRICS"] == "emf"


def test_the_image_installs_the_project_without_a_pip_cache() -> None:
    copied = " ".join(arguments_of("COPY"))
    for needed in ("requirements.lock", "pyproject.toml", "README.md", *LICENSE_FILES, "worker/"):
        assert needed in copied
    installs = [run for run in arguments_of("RUN") if "pip install" in run]
    assert installs
    assert all("pip install --no-cache-dir " in run for run in installs)
    assert any(re.search(r"pip install [^&]* \.(\s|$)", run) for run in installs)


def test_the_build_context_admits_what_the_image_copies() -> None:
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "an allowlist: nothing enters the context unless named"
    admitted = {"!pyproject.toml", "!requirements.lock", "!README.md", "!worker/"}
    assert admitted | {f"!{name}" for name in LICENSE_FILES} <= set(lines)


# ---------------------------------------------------------------------------- localstack.yml


def test_the_compose_file_has_localstack_bootstrap_and_worker(compose: dict[str, Any]) -> None:
    assert {"localstack", "bootstrap", "worker"} <= set(compose["services"])
    localstack = service(compose, "localstack")
    assert localstack["image"].split(":")[0] == "localstack/localstack"
    assert set(localstack["environment"]["SERVICES"].split(",")) == {"sqs", "dynamodb", "s3"}
    assert localstack["healthcheck"]["test"]


def test_every_published_port_is_bound_to_127_0_0_1_only(compose: dict[str, Any]) -> None:
    for name, spec in compose["services"].items():
        assert spec.get("network_mode") != "host", name
        for port in spec.get("ports", []):
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", (name, port)
            else:
                assert str(port).startswith("127.0.0.1:"), (name, port)
    assert service(compose, "localstack")["ports"] == ["127.0.0.1:4566:4566"]


def test_bootstrap_runs_once_against_localstack_when_it_is_healthy(
    compose: dict[str, Any],
) -> None:
    bootstrap = service(compose, "bootstrap")
    assert bootstrap["command"] == ["bootstrap"]
    assert bootstrap["build"] in (".", {"context": "."})
    assert bootstrap["depends_on"]["localstack"]["condition"] == "service_healthy"
    env = bootstrap["environment"]
    assert env["AWS_ENDPOINT_URL"] == LOCALSTACK_ENDPOINT
    assert env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_ACCESS_KEY_ID"]
    assert env["AWS_SECRET_ACCESS_KEY"]


def test_the_worker_starts_after_bootstrap_succeeded(compose: dict[str, Any]) -> None:
    worker = service(compose, "worker")
    assert worker["command"] == ["run"]
    assert worker["image"] == service(compose, "bootstrap")["image"]
    assert worker["depends_on"]["bootstrap"]["condition"] == "service_completed_successfully"


def test_the_worker_is_pointed_at_what_bootstrap_creates(compose: dict[str, Any]) -> None:
    env = service(compose, "worker")["environment"]
    resources = Resources()
    assert resources.prefix == "mira"
    for spec in resources.queues:
        assert env[spec.env] == f"{LOCALSTACK_ENDPOINT}/{LOCALSTACK_ACCOUNT}/{spec.name}"
    assert env["HISTORY_TABLE"] == resources.table
    assert env["LEDGER_TABLE"] == resources.ledger_table
    assert env["PAYLOAD_BUCKET"] == resources.bucket
    assert env["AWS_ENDPOINT_URL"] == LOCALSTACK_ENDPOINT


def test_the_worker_service_has_every_setting_the_worker_requires(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for field in Settings.model_fields:  # nothing from the machine running the test
        monkeypatch.delenv(field.upper(), raising=False)
    for name, value in service(compose, "worker")["environment"].items():
        monkeypatch.setenv(name, str(value))
    Settings()  # raises, as the worker refuses to start, on a missing required variable


def test_compose_kills_the_worker_only_after_its_stop_can_have_finished(
    compose: dict[str, Any],
) -> None:
    """Compose's default is 10 s, inside the worker's stop (up to 22 s, then final calls)."""
    worker = service(compose, "worker")
    assert seconds(worker["stop_grace_period"]) >= kill_after_seconds(worker["environment"]) == 42
