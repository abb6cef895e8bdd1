"""The README's test command is CI's: `.ci/run` is `CI=true make test`, `make test` installs
what the suite needs (LocalStack's SQS and S3 on the host included) before it runs, from the
hashed locks, runs the unit suite on the newer Pythons too, and a LocalStack test or a Python
that cannot run fails under CI instead of skipping."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_localstack import localstack_is_missing

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_make_test_and_nothing_else() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line.strip() for line in script if line.strip() and not line.startswith("#")]
    assert commands[-2:] == ["export CI=true", "make test"]
    assert [c for c in commands if c.startswith("make")] == ["make test"]


def test_make_test_installs_localstack_before_it_runs_the_suite() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    [prerequisites] = re.findall(r"^test:(.*)$", makefile, flags=re.MULTILINE)
    assert set(prerequisites.split()) >= {"lint", "localstack-host"}


def test_the_readme_gives_make_test_as_the_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^make test +# ", readme, flags=re.MULTILINE)


def test_without_localstack_ci_fails_and_a_hand_run_skips_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: the LocalStack tests must run"):
        localstack_is_missing()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="run `make localstack-host`"):
        localstack_is_missing()


def make_dry_run(*arguments: str, ci: bool) -> list[str]:
    """The commands make would run (`make -n`: printed, not run), with CI set or unset."""
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "MAKEFLAGS")}
    if ci:
        env["CI"] = "true"
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


def test_make_install_installs_only_the_hashed_dev_lock_and_then_the_project_alone() -> None:
    """-B: the commands of a first install, whatever this checkout's .venv holds."""
    installs = [line for line in make_dry_run("-B", "install", ci=True) if "pip install" in line]
    assert len(installs) == 2, installs
    from_lock, project = installs
    for option in ("--require-hashes", "--no-deps", "-r requirements-dev.lock"):
        assert option in from_lock, option
    for option in ("--no-deps", "--no-build-isolation", "-e ."):
        assert option in project, option


def test_localstack_installs_only_from_its_hashed_lock() -> None:
    """LocalStack is a tool CI runs: its venv takes nothing the lock does not pin and hash."""
    installs = [
        line for line in make_dry_run("-B", "localstack-host", ci=True) if "pip install" in line
    ]
    assert len(installs) == 1, installs
    for option in ("--require-hashes", "--no-deps", "-r requirements-localstack.lock"):
        assert option in installs[0], option
    lock = (ROOT / "requirements-localstack.lock").read_text(encoding="utf-8")
    pins = [line for line in lock.splitlines() if line and not line[0].isspace() and line[0] != "#"]
    assert any(line.startswith("localstack-core==4.7.0") for line in pins)
    assert all("==" in line and line.endswith("\\") for line in pins)  # pinned, hashes follow


@pytest.mark.parametrize(
    ("ci", "missing"),
    [(True, "--error-on-missing-interpreters"), (False, "--no-error-on-missing-interpreters")],
)
def test_make_test_runs_the_unit_suite_on_3_12_and_3_13_after_the_whole_suite(
    ci: bool, missing: str
) -> None:
    """A Python that is not installed is skipped by hand and fails CI."""
    commands = make_dry_run("test", ci=ci)
    [pytest_at] = [i for i, line in enumerate(commands) if line.endswith("/pytest")]
    [nox] = [line for line in commands if "/nox " in line]
    assert commands.index(nox) > pytest_at
    assert "--session unit --python 3.12 3.13" in nox
    assert nox.endswith(missing)


def test_the_nox_sessions_are_the_unit_suite_on_each_supported_python() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "--list", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    sessions = {session["session"]: session for session in json.loads(listed.stdout)}
    assert set(sessions) == {"unit-3.11", "unit-3.12", "unit-3.13"}
