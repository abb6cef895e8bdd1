"""The README's test command is CI's: `.ci/run` is `CI=true make test`, `make test` installs
what the suite needs (LocalStack's SQS and S3 on the host included) before it runs, and a
LocalStack test that cannot run fails under CI instead of skipping."""

from __future__ import annotations

import re
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
