"""The README's test command is CI's: `.ci/run` is `CI=true make test`, `make test` installs
what the suite needs (LocalStack's SQS and S3 on the host included) before it runs, from the
hashed locks, runs the files side by side, runs the unit suite on the newer Pythons too, and a
LocalStack test or a Python that cannot run fails under CI instead of skipping."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import hypothesis
import pytest

from tests.integration.test_localstack import localstack_is_missing

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_make_test_and_nothing_else() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line.strip() for line in script if line.strip() and not line.startswith("#")]
    assert commands[-2:] == ["export CI=true", "make test"]
    assert [c for c in commands if c.startswith("make")] == ["make test"]


def test_make_test_installs_localstack_and_lints_before_it_runs_the_suite() -> None:
    """-B: the commands of a fresh clone's run, whatever this checkout already installed."""
    commands = make_dry_run("-B", "test", ci=True)
    [suite] = [i for i, line in enumerate(commands) if re.search(r"/pytest( |$)", line)]
    before = commands[:suite]
    assert any("-r requirements-localstack.lock" in line for line in before)
    for lint in ("ruff check", "mypy", "lint-imports", "cfn-lint", "checkov", "hadolint"):
        assert any(lint in line for line in before), lint


def test_make_test_runs_the_files_side_by_side_each_on_one_worker_longest_first() -> None:
    [suite] = [line for line in make_dry_run("test", ci=True) if re.search(r"/pytest ", line)]
    options = suite.split()
    assert options[options.index("-n") + 1].isdigit()
    assert options[options.index("--dist") + 1] == "loadfile"
    # xdist hands the files out in the order tests/schedule.py sorts them, not by test count.
    assert "--no-loadscope-reorder" in options


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


def installs(target: str) -> list[str]:
    """The install commands of ``target`` on a fresh clone (-B), under CI, up to the suite
    (with -B, the sub-make that runs the other Pythons would print every install again)."""
    commands = make_dry_run("-B", target, ci=True)
    suite = [i for i, line in enumerate(commands) if re.search(r"/pytest( |$)", line)]
    return [line for line in commands[: (suite or [None])[0]] if "pip install" in line]


def test_every_install_takes_only_a_hashed_lock_or_the_project_alone() -> None:
    """pip (uv alone, into the tools venv) and then uv (everything else) refuse a file whose
    hash the lock does not hold, and install nothing the lock does not name."""
    commands = installs("test")
    for command in commands:
        assert "--no-deps" in command, command
        if " -r " in command:
            assert "--require-hashes" in command, command
        else:
            assert "--no-build-isolation -e ." in command, command
    [bootstrap, *rest] = commands
    assert "python -m pip install" in bootstrap and "requirements-uv.txt" in bootstrap
    assert all("/uv pip install" in command for command in rest)
    assert len(rest) == 4  # .venv (the lock, the project), the tools, LocalStack; nox: noxfile.py


def test_uv_comes_from_its_own_lines_in_the_tools_lock() -> None:
    [extract] = [line for line in make_dry_run("-B", "tools", ci=True) if line.startswith("awk")]
    program, lock = re.fullmatch(r"awk '(.*)' (\S+) > \S+requirements-uv.txt", extract).groups()
    lines = subprocess.run(
        ["awk", program, lock], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert lines[0] == "uv==0.13.8 \\"
    assert all(line.strip().startswith(("--hash=sha256:", "#")) for line in lines[1:])
    assert len(lines) > 2


def test_make_install_installs_only_the_hashed_dev_lock_and_then_the_project_alone() -> None:
    *_, from_lock, project = installs("install")
    assert "-r requirements-dev.lock" in from_lock
    assert "--python .venv/bin/python" in from_lock and "--python .venv/bin/python" in project
    assert "-e ." in project


def test_localstack_installs_only_from_its_hashed_lock() -> None:
    """LocalStack is a tool CI runs: its venv takes nothing the lock does not pin and hash."""
    *_, localstack = installs("localstack-host")
    assert "-r requirements-localstack.lock" in localstack
    assert "--python .localstack/venv/bin/python" in localstack
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
    """Side by side, one nox per Python; their venvs installed before the suite. A Python
    that is not installed is skipped by hand and fails CI."""
    commands = make_dry_run("test", ci=ci)
    [suite] = [i for i, line in enumerate(commands) if re.search(r"/pytest ", line)]
    [install] = [i for i, line in enumerate(commands) if "/nox --install-only" in line]
    runs = [line for line in commands[suite:] if "/nox --session" in line]
    assert install < suite
    assert "--session unit-3.12 unit-3.13 " in commands[install]
    assert sorted(line.split("--session ")[1].split()[0] for line in runs) == [
        "unit-3.12",
        "unit-3.13",
    ]
    assert all(line.endswith(missing) for line in [commands[install], *runs])


def test_the_python_runs_go_side_by_side() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    [pythons] = re.findall(r"^pythons:.*\n\t(.*)$", makefile, flags=re.MULTILINE)
    assert "-j2" in pythons.split() and "$(OTHER_PYTHONS:%=unit-%)" in pythons


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


def test_ci_draws_the_same_property_examples_on_every_run_and_as_many() -> None:
    local, ci = (hypothesis.settings.get_profile(p) for p in ("any-machine", "any-machine-ci"))
    assert (local.derandomize, ci.derandomize) == (False, True)
    assert ci.database is None  # nothing shared between the Pythons' runs side by side
    assert ci.max_examples == local.max_examples and ci.phases == local.phases
    expected = "any-machine-ci" if os.environ.get("CI") == "true" else "any-machine"
    assert hypothesis.settings.get_current_profile_name() == expected
