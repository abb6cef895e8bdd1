"""The layering of ``worker/`` (and of the support package, the benchmark and the tests around
it) is checked, not only described: the import-linter contracts in ``pyproject.toml`` (run by
``make lint``) pass on the tree and fail on an import that breaks them. Each case copies the
packages, adds one import, and runs ``lint-imports`` on the copy. And nothing in ``worker/``
is left that its entry point does not reach."""

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
    for package in ("worker", "localaws", "bench", "tests"):  # pyproject's root packages
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(tree: Path, module: str, imported: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\nimport {imported}  # breaks the layering\n")


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout
    assert "14 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "imported", "broken"),
    [
        ("worker.memory.tokens", "worker.errors", "the memory is pure"),
        ("worker.adapters.sqs", "worker.turn.stage", "adapters never import the turn"),
        ("worker.turn.stage", "worker.app.runtime", "nothing imports the entry points"),
        ("worker.delivery.batching", "worker.telemetry.metrics", "no import runs upward"),
        ("worker.consumer.loop", "worker.turn.stage", "no import runs upward"),
        ("worker.telemetry.metrics", "worker.telemetry.hooks", "no import cycles between sibling"),
        ("worker.memory.history_window", "localaws.endpoints", "the worker imports none of"),
        ("localaws.proxy", "tests.conftest", "localaws (local AWS for tests and benchmark)"),
        ("localaws.bedrock_cache", "worker.caching.bill_model", "the Bedrock cache stand-in"),
        ("tests.integration.test_proxy", "bench.run_all", "the tests never import the benchmark"),
        ("bench.servers.procstats", "tests.conftest", "the benchmark never imports the tests"),
        ("bench.reports.fold_gap", "bench.parts.fold_gap", "the benchmark's layers"),
        ("bench.load.workload", "bench.load.traffic", "no import cycles in the benchmark"),
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


def test_every_module_of_the_worker_is_reached_from_its_entry_point() -> None:
    """Product code no entry point runs (a module only a benchmark or a test imports) is
    dead weight in the image: every module of ``worker`` is imported, at some depth, from
    ``worker.cli`` (``worker = "worker.cli:main"``); package ``__init__`` modules count as
    reached with their children."""
    import grimp

    graph = grimp.build_graph("worker")
    reached: set[str] = set()
    pending = ["worker.cli"]
    while pending:
        module = pending.pop()
        if module not in reached:
            reached.add(module)
            pending.extend(graph.find_modules_directly_imported_by(module))
    packages = {module.rsplit(".", 1)[0] for module in reached}
    unreached = sorted(
        module
        for module in graph.modules
        if module not in reached | packages and not module.endswith(".__main__")
    )
    assert unreached == []
