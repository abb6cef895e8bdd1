"""The image builds from what is pinned, read from the files (no Docker here): a hashed lock
that covers every dependency pyproject.toml declares, a Dockerfile that installs only from it
on a patch-pinned base, and manifests and a template that name the image by version tag and
digest. The dev and tools locks the same way: every tool the tests, the lint and the scanners
run is pinned, hashed, and the same on each Python the project supports."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.infra.cfn_yaml import REPO_ROOT
from tests.infra.test_dockerfile_and_compose import DOCKERIGNORE, arguments_of

LOCK = REPO_ROOT / "requirements.lock"
DEV_LOCK = REPO_ROOT / "requirements-dev.lock"
TOOLS_LOCK = REPO_ROOT / "requirements-tools.lock"
#: The Pythons requires-python admits that the locks must serve (the image runs the first).
SUPPORTED_PYTHONS = ("3.11", "3.12", "3.13")
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
    marker: Marker | None = None

    def applies_on(self, python: str) -> bool:
        """Whether pip installs this entry on CPython ``python`` (``"3.12"``) on Linux."""
        return self.marker is None or self.marker.evaluate(linux_cpython(python))


def linux_cpython(python: str) -> dict[str, str]:
    """The marker environment of CPython ``python``.0 on x86_64 Linux (the image's kind)."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "extra": "",
    }


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
                marker=requirement.marker,
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


def entries_by_name(path: Path) -> dict[str, list[LockedRequirement]]:
    """A universal lock names a package once, or once per Python range with a marker each."""
    by_name: dict[str, list[LockedRequirement]] = {}
    for entry in locked_requirements(path.read_text(encoding="utf-8")):
        by_name.setdefault(entry.name, []).append(entry)
    return by_name


@pytest.fixture(scope="module")
def dev_lock() -> dict[str, list[LockedRequirement]]:
    return entries_by_name(DEV_LOCK)


def installed_on(entries: list[LockedRequirement], python: str) -> LockedRequirement | None:
    """The one entry pip installs on ``python``; two would be a lock pip refuses."""
    applying = [entry for entry in entries if entry.applies_on(python)]
    assert len(applying) <= 1, f"{[entry.line for entry in applying]} all apply on {python}"
    return applying[0] if applying else None


def dev_requirements() -> list[Requirement]:
    """What .venv and the nox sessions need: the runtime, the build backend, the dev extra."""
    return declared(
        [
            *PYPROJECT["project"]["dependencies"],
            *PYPROJECT["build-system"]["requires"],
            *PYPROJECT["project"]["optional-dependencies"]["dev"],
        ]
    )


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


def test_the_lock_parser_reads_a_marker_per_python_range() -> None:
    text = (
        f"networkx==3.6.1 ; python_full_version < '3.12' \\\n    --hash=sha256:{'a' * 64}\n"
        f"networkx==3.7 ; python_full_version >= '3.12' \\\n    --hash=sha256:{'b' * 64}\n"
    )
    older, newer = locked_requirements(text)
    assert [older.applies_on(v) for v in SUPPORTED_PYTHONS] == [True, False, False]
    assert [newer.applies_on(v) for v in SUPPORTED_PYTHONS] == [False, True, True]
    assert installed_on([older, newer], "3.13") is newer


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
    """The image carries the worker's runtime only: none of the dev, demo or bench extras."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    only_extras = {
        canonicalize_name(Requirement(text).name) for name in extras for text in extras[name]
    }
    assert only_extras
    assert not only_extras & set(lock)


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_the_runtime_lock_installs_every_declared_dependency_on_each_supported_python(
    python: str,
) -> None:
    """One universal lock (`make lock`: uv pip compile --universal): what the image installs on
    3.11 is what a 3.12 or 3.13 install of the same file gets, each package within its range."""
    by_name = entries_by_name(LOCK)
    for requirement in declared(PYPROJECT["project"]["dependencies"]):
        locked = installed_on(by_name.get(canonicalize_name(requirement.name), []), python)
        assert locked is not None, f"nothing of {requirement.name} installs on {python}"
        assert requirement.specifier.contains(locked.version, prereleases=True), locked.line


def test_the_floor_python_is_the_one_the_image_mypy_and_ruff_use() -> None:
    """requires-python's floor is what the image runs, what mypy checks against and what ruff
    allows: code that needs 3.12 fails the lint, not a 3.11 deployment."""
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == "3.11"
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py311"
    (base,) = arguments_of("FROM")
    match = PINNED_BASE.fullmatch(base.split()[0])
    assert match is not None and match["python"].startswith("3.11.")


# ---------------------------------------------------------------------------- the dev lock


def test_every_dev_lock_entry_is_pinned_and_hashed(
    dev_lock: dict[str, list[LockedRequirement]],
) -> None:
    entries = [entry for same_name in dev_lock.values() for entry in same_name]
    assert entries
    assert [entry.line for entry in entries if not entry.hashes] == []
    twice = {name: same for name, same in dev_lock.items() if len(same) > 1}
    assert all(entry.marker is not None for same in twice.values() for entry in same), twice


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
@pytest.mark.parametrize("requirement", dev_requirements(), ids=lambda req: req.name)
def test_the_dev_lock_covers_each_runtime_dev_and_build_requirement_on_each_python(
    dev_lock: dict[str, list[LockedRequirement]], requirement: Requirement, python: str
) -> None:
    """.venv and each nox session install this file alone (--no-deps): every tool the tests,
    the lint and the build use must be in it, within pyproject.toml's range, on each Python."""
    locked = installed_on(dev_lock.get(canonicalize_name(requirement.name), []), python)
    assert locked is not None, f"{requirement.name} is not in the dev lock: run `make lock`"
    assert requirement.specifier.contains(locked.version, prereleases=True), (
        f"{locked.line} is outside pyproject.toml's {requirement}: run `make lock`"
    )


def test_the_dev_lock_holds_the_runtime_at_the_images_versions(
    lock: dict[str, LockedRequirement], dev_lock: dict[str, list[LockedRequirement]]
) -> None:
    """The tests run the very versions the image ships (`make lock` compiles the dev lock
    with requirements.lock as its constraint)."""
    differing = {
        name: (str(runtime.version), [entry.line for entry in dev_lock.get(name, [])])
        for name, runtime in lock.items()
        if [entry.version for entry in dev_lock.get(name, [])] != [runtime.version]
    }
    assert differing == {}


def test_the_dev_lock_installs_the_extras_parts_the_dev_extra_names(
    dev_lock: dict[str, list[LockedRequirement]],
) -> None:
    """An extra's packages are in the lock as packages of their own: moto[server] needs flask,
    types-aiobotocore[sqs,dynamodb,s3] the three service stubs."""
    for name in (
        "flask",
        "types-aiobotocore-sqs",
        "types-aiobotocore-dynamodb",
        "types-aiobotocore-s3",
    ):
        assert name in dev_lock, name


# ---------------------------------------------------------------------------- the tools lock


def tools_pins() -> list[Requirement]:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    (pins,) = re.findall(r"^TOOLS_PINS := (.+)$", makefile, flags=re.MULTILINE)
    return declared(pins.split())


def test_the_tools_lock_pins_exactly_the_makefiles_scanners_and_uv_hashed() -> None:
    """The scanners' venv installs requirements-tools.lock: a TOOLS_PINS edit without
    `make lock` would leave the old versions installed."""
    locked = entries_by_name(TOOLS_LOCK)
    assert all(entry.hashes for same in locked.values() for entry in same)
    for pin in tools_pins():
        entries = locked.get(canonicalize_name(pin.name), [])
        assert [str(entry.version) for entry in entries] == [str(next(iter(pin.specifier)).version)]


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
