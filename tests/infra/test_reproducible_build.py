"""The image builds from what is pinned, read from the files (no Docker here): a hashed lock
that covers every dependency pyproject.toml declares, a Dockerfile that installs only from it
on a patch-pinned base, and manifests and a template that name the image by version tag and
digest."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.infra.cfn_yaml import REPO_ROOT
from tests.infra.test_dockerfile_and_compose import DOCKERIGNORE, arguments_of

LOCK = REPO_ROOT / "requirements.lock"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})(?=\s|$)")
#: A Docker Hub python image pinned to a patch release and a Debian release, maybe a digest.
PINNED_BASE = re.compile(
    r"python:(?P<python>3\.\d+\.\d+)-slim-(?P<debian>[a-z]+)(?:@sha256:[0-9a-f]{64})?"
)


@dataclass(frozen=True)
class LockedRequirement:
    name: str
    version: Version
    hashes: tuple[str, ...]
    line: str


def locked_requirements(text: str) -> list[LockedRequirement]:
    """Each requirement of a pip requirements file, continuation lines joined, comments out."""
    entries, pending = [], ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line and not pending:
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        entries.append(pending + line)
        pending = ""
    if pending:
        entries.append(pending)

    locked = []
    for entry in entries:
        requirement_text = entry.split(" --", 1)[0].strip()
        requirement = Requirement(requirement_text)
        specifiers = list(requirement.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==":
            raise ValueError(f"not pinned with ==: {entry!r}")
        (specifier,) = specifiers
        locked.append(
            LockedRequirement(
                name=canonicalize_name(requirement.name),
                version=Version(specifier.version),
                hashes=tuple(HASH.findall(entry)),
                line=requirement_text,
            )
        )
    return locked


@pytest.fixture(scope="module")
def lock() -> dict[str, LockedRequirement]:
    entries = locked_requirements(LOCK.read_text(encoding="utf-8"))
    by_name = {entry.name: entry for entry in entries}
    assert len(by_name) == len(entries), "a package is locked twice"
    return by_name


def declared(requirements: list[str]) -> list[Requirement]:
    return [Requirement(text) for text in requirements]


# ---------------------------------------------------------------------------- the lock


def test_the_lock_parser_reads_continuations_hashes_and_pins() -> None:
    """Guard the parser: a two-hash entry with comments, and a refusal of an unpinned one."""
    text = (
        "# header\n"
        "aioboto3==15.5.0 \\\n"
        f"    --hash=sha256:{'a' * 64} \\\n"
        f"    --hash=sha256:{'b' * 64}\n"
        "    # via mira-converse-worker (pyproject.toml)\n"
        "Typing_Extensions==4.16.0\n"
    )
    (first, second) = locked_requirements(text)
    assert (first.name, str(first.version), first.hashes) == (
        "aioboto3",
        "15.5.0",
        ("a" * 64, "b" * 64),
    )
    assert (second.name, second.hashes) == ("typing-extensions", ())
    with pytest.raises(ValueError, match="not pinned"):
        locked_requirements("structlog>=24.1 --hash=sha256:" + "c" * 64 + "\n")


def test_every_locked_requirement_is_pinned_and_hashed(lock: dict[str, LockedRequirement]) -> None:
    """pip's --require-hashes refuses a file with one unhashed requirement: so does this."""
    assert lock
    assert [entry.line for entry in lock.values() if not entry.hashes] == []


@pytest.mark.parametrize(
    "requirement",
    declared(PYPROJECT["project"]["dependencies"]),
    ids=lambda requirement: requirement.name,
)
def test_the_lock_covers_each_declared_dependency_within_its_range(
    lock: dict[str, LockedRequirement], requirement: Requirement
) -> None:
    locked = lock.get(canonicalize_name(requirement.name))
    assert locked is not None, f"{requirement.name} is declared but not locked: run `make lock`"
    assert requirement.specifier.contains(locked.version, prereleases=True), (
        f"{locked.line} is outside pyproject.toml's {requirement}: run `make lock`"
    )


@pytest.mark.parametrize(
    "requirement",
    declared(PYPROJECT["build-system"]["requires"]),
    ids=lambda requirement: requirement.name,
)
def test_the_lock_covers_the_build_backend_the_image_builds_with(
    lock: dict[str, LockedRequirement], requirement: Requirement
) -> None:
    """The image builds the project with --no-build-isolation, so the backend must be locked."""
    locked = lock.get(canonicalize_name(requirement.name))
    assert locked is not None and requirement.specifier.contains(locked.version)


def test_the_lock_holds_no_development_or_benchmark_tool(
    lock: dict[str, LockedRequirement],
) -> None:
    """The image carries the worker's runtime only: none of the dev or bench extras."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    only_extras = {
        canonicalize_name(Requirement(text).name)
        for name in ("dev", "bench")
        for text in extras[name]
    }
    assert not only_extras & set(lock)


# ---------------------------------------------------------------------------- the Dockerfile


def run_lines() -> list[str]:
    return arguments_of("RUN")


def test_the_base_image_is_pinned_to_a_python_patch_release_the_project_supports() -> None:
    (base,) = arguments_of("FROM")
    match = PINNED_BASE.fullmatch(base.split()[0])
    assert match is not None, f"{base!r}: pin python:<3.x.y>-slim-<debian>[@sha256:…]"
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(match["python"])


def test_the_dependencies_are_installed_from_the_lock_with_their_hashes_only() -> None:
    installs = [line for line in run_lines() if "pip install" in line]
    (from_lock,) = [line for line in installs if "requirements.lock" in line]
    for option in ("--require-hashes", "--no-deps", "--no-cache-dir", "-r requirements.lock"):
        assert option in from_lock, option
    assert "requirements.lock" in " ".join(arguments_of("COPY"))
    assert "!requirements.lock" in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()


def test_the_project_itself_is_installed_without_fetching_anything() -> None:
    """--no-deps: nothing outside the lock; --no-index and --no-build-isolation: no download
    at all, not even of an unpinned build backend."""
    (project,) = [line for line in run_lines() if re.search(r"pip install [^&]* \.(\s|$)", line)]
    for option in ("--no-deps", "--no-index", "--no-build-isolation", "--no-cache-dir"):
        assert option in project, option


def test_every_pip_install_in_the_image_is_one_of_the_two_pinned_ones() -> None:
    installs = [line for line in run_lines() if "pip install" in line]
    assert len(installs) == 2, installs


# ---------------------------------------------------------------------------- what deploys it


def project_version() -> str:
    return str(PYPROJECT["project"]["version"])


def deployment_image() -> str:
    documents = yaml.safe_load_all(
        (REPO_ROOT / "infra" / "k8s" / "deployment.yaml").read_text(encoding="utf-8")
    )
    (deployment,) = [doc for doc in documents if doc and doc["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def test_kubernetes_runs_the_image_by_the_projects_version_tag_and_a_digest() -> None:
    """A tag can be pushed again; the digest cannot. Both: the tag says which release, the
    digest makes it exactly the image that was tested."""
    image = deployment_image()
    match = re.fullmatch(r"(?P<repository>[^@]+):(?P<tag>[^:/@]+)@sha256:[0-9a-f]{64}", image)
    assert match is not None, f"{image!r}: use <repository>:<version>@sha256:<digest>"
    assert match["tag"] == project_version() != "latest"
    assert match["repository"].endswith("/mira-converse-worker")
