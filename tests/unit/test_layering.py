"""The layering of ``worker/`` is checked, not only described: the import-linter contracts in
``pyproject.toml`` (run by ``make lint``) pass on the tree and fail on an import that breaks
them. Each case copies the package, adds one import, and runs ``lint-imports`` on the copy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "worker", tmp_path / "worker", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(tree: Path, module: str, imported: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\nimport {imported}  # breaks the layering\n")


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout
    assert "5 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "imported", "broken"),
    [
        ("worker.memory.tokens", "worker.errors", "the memory is pure"),
        ("worker.adapters.sqs", "worker.turn.stage", "adapters never import the turn"),
        ("worker.turn.stage", "worker.cli.runtime", "nothing imports the entry points"),
        ("worker.delivery.batching", "worker.telemetry.metrics", "no import runs upward"),
        ("worker.turn.history", "worker.consumer.loop", "no import runs upward"),
        ("worker.telemetry.metrics", "worker.telemetry.turn", "no import cycles"),
    ],
)
def test_an_import_that_breaks_the_layering_fails_the_lint(
    tree: Path, module: str, imported: str, broken: str
) -> None:
    add_import(tree, module, imported)
    result = lint_imports(tree)
    assert result.returncode != 0
    [line] = [line for line in result.stdout.splitlines() if broken in line and "BROKEN" in line]
    assert line.endswith("BROKEN")
