"""Every metric the stage writes is declared once, in :mod:`worker.telemetry.metric_names`, and
written as declared.

The source is checked as the log events are (``tests/unit/test_reference_docs.py``): every
metric ``worker/`` records (the name given to a recorder's ``count``, ``observe`` or
``mark``, or to the EMF context's ``put_metric``) is declared, and every declared metric is
named somewhere outside its declaration. What an interval writes is checked against the
declaration too: each metric with its unit and dimensions, and each dimension's values are
the ones the code gives.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest

from tests.unit.conftest import append_function
from worker.caching.anchor import ReanchorReason
from worker.caching.diagnosis import CAUSES
from worker.memory.converse import CacheTtl
from worker.telemetry import metric_names as names
from worker.telemetry.hooks import REJECTION_KINDS
from worker.telemetry.metric_names import BY_NAME, METRICS, Metric
from worker.telemetry.metrics import COUNTERS, DISTRIBUTIONS, MetricsBook, emf_documents

ROOT = Path(__file__).resolve().parents[3]
WORKER = ROOT / "worker"
DECLARATION = Path("telemetry") / "metric_names.py"
#: The methods that take a metric's name first: the recorders' and the EMF context's.
RECORDING_METHODS = frozenset({"count", "observe", "mark", "put_metric"})
#: What a metric's name looks like, to tell one given as a literal from ``text.count("\n")``.
METRIC_NAME = re.compile(r"[A-Z][a-z]+(?:[A-Z][a-z]*)+")
DIMENSIONS = {names.SERVICE_DIMENSION: names.SERVICE, names.QUEUE_DIMENSION: "mira-converse"}
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def test_every_metric_the_worker_records_is_declared_and_every_declared_one_is_named() -> None:
    assert metric_problems(WORKER, METRICS) == []


@pytest.mark.parametrize(
    ("constant", "body"),
    [
        ("", 'metrics.observe("TurnQueueDepth", 3)'),
        ('TURN_QUEUE_DEPTH = "TurnQueueDepth"', "metrics.count(m.TURN_QUEUE_DEPTH)"),
        (
            'TURN_QUEUE_DEPTH = "TurnQueueDepth"',
            "metrics.count(m.COMMANDS_SERVED if metrics else m.TURN_QUEUE_DEPTH)",
        ),
    ],
    ids=["a literal", "a constant", "one branch of a choice"],
)
def test_the_check_fails_on_a_metric_recorded_but_not_declared(
    worker_copy: Path, constant: str, body: str
) -> None:
    """GIVEN a copy of worker/ that records one more metric (its constant, where it has one,
    beside the declared ones but not declared), WHEN the same check runs on the copy, THEN it
    names the metric and where it is recorded."""
    declaration = worker_copy / DECLARATION
    declaration.write_text(f"{declaration.read_text()}\n{constant}\n")
    line = append_function(worker_copy / "telemetry" / "hooks.py", body)

    assert metric_problems(worker_copy, METRICS) == [
        f"worker/telemetry/hooks.py:{line}: TurnQueueDepth is recorded but not declared in "
        "worker/telemetry/metric_names.py"
    ]


def test_the_check_fails_on_a_declared_metric_nothing_records(worker_copy: Path) -> None:
    hooks = worker_copy / "telemetry" / "hooks.py"
    hooks.write_text(hooks.read_text().replace("metrics.count(m.CACHE_CHECKS)", "pass"))

    assert metric_problems(worker_copy, METRICS) == [
        "CacheChecks is declared in worker/telemetry/metric_names.py but named nowhere else"
    ]


def test_each_metric_is_declared_once_with_a_metrics_name_and_a_meaning() -> None:
    metric_names = [metric.name for metric in METRICS]
    assert len(metric_names) == len(set(metric_names)) == len(BY_NAME)
    assert all(METRIC_NAME.fullmatch(name) for name in metric_names)
    assert all(metric.meaning.endswith(".") for metric in METRICS)


def test_only_counters_are_split_by_a_dimension_and_only_a_split_one_skips_its_total() -> None:
    assert [m.name for m in METRICS if not m.total and m.per is None] == []
    assert [m.name for m in METRICS if m.per is not None and m.kind == "distribution"] == []


def test_counters_and_distributions_are_the_declared_ones_of_their_kind() -> None:
    assert list(COUNTERS.items()) == [(m.name, m.unit) for m in METRICS if m.kind == "counter"]
    assert list(DISTRIBUTIONS.items()) == [
        (m.name, m.unit) for m in METRICS if m.kind == "distribution"
    ]


def test_each_dimensions_values_are_the_ones_the_code_gives() -> None:
    """The closed sets the page lists are the rejection kinds the hooks tell apart (and
    ``other``), the anchor's reasons to re-anchor, the lifetimes a point can get (and ``none``:
    left out), and the causes of a miss."""
    assert values_of(names.COMMANDS_REJECTED) == (
        *(kind for _, kind in REJECTION_KINDS),
        "other",
    )
    assert values_of(names.WINDOW_REANCHORS) == get_args(ReanchorReason)
    assert values_of(names.CACHE_POINT_TTLS) == (*get_args(CacheTtl), "none")
    assert values_of(names.CACHE_MISSES) == CAUSES


def test_an_interval_writes_each_metric_with_its_declared_unit_and_dimensions() -> None:
    """GIVEN a book with every metric recorded, for every value of its dimension, WHEN the
    interval is written, THEN each metric appears with its declared unit, in all (unless it is
    written only per value) and once per value of its dimension; and nothing else appears."""
    book = MetricsBook()
    for metric in METRICS:
        record_every_value(book, metric)

    written: dict[str, set[tuple[str, ...]]] = {}
    for line in emf_documents(book.take(), DIMENSIONS, NOW):
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == names.NAMESPACE
            [dimension_set] = directive["Dimensions"]
            for definition in directive["Metrics"]:
                name = definition["Name"]
                assert definition["Unit"] == BY_NAME[name].unit, name
                extra = tuple(document[key] for key in dimension_set if key not in DIMENSIONS)
                written.setdefault(name, set()).add((*dimension_set[2:], *extra))

    assert written == {metric.name: expected_dimensions(metric) for metric in METRICS}


def values_of(name: str) -> tuple[str, ...]:
    per = BY_NAME[name].per
    assert per is not None
    return per.values


def record_every_value(book: MetricsBook, metric: Metric) -> None:
    """One of ``metric`` through the book's method for it, for each value of its dimension."""
    by_value = {
        names.COMMANDS_REJECTED: book.rejected,
        names.WINDOW_REANCHORS: book.reanchored,
        names.CACHE_MISSES: book.cache_missed,
        names.CACHE_POINT_TTLS: lambda ttl: book.ttl_chosen(ttl, 1),
    }
    if metric.per is not None:
        for value in metric.per.values:
            by_value[metric.name](value)
    elif metric.kind == "distribution":
        book.observe(metric.name, 1.0)
    else:
        book.count(metric.name)


def expected_dimensions(metric: Metric) -> set[tuple[str, ...]]:
    """The dimensions beyond Service and Queue each of the metric's documents carries: none in
    all, the dimension's name and one value per value."""
    expected: set[tuple[str, ...]] = {()} if metric.total else set()
    if metric.per is not None:
        expected |= {(metric.per.name, value) for value in metric.per.values}
    return expected


# -- the check against the source -------------------------------------------------------------


def metric_problems(root: Path, declared: tuple[Metric, ...]) -> list[str]:
    """What is wrong between the metrics recorded under ``root`` (``worker/`` or a copy; its
    declaration module is read for the constants, not scanned) and ``declared``."""
    declared_names = {metric.name for metric in declared}
    trees = {
        path: ast.parse(path.read_text(), filename=str(path)) for path in sorted(root.rglob("*.py"))
    }
    constants = _constants(trees.values())
    scanned = {path: tree for path, tree in trees.items() if path != root / DECLARATION}
    problems = [
        f"{where}: {name} is recorded but not declared in worker/telemetry/metric_names.py"
        for name, where in _recorded(scanned, root, constants)
        if name not in declared_names
    ]
    named = set(_named(scanned.values(), _constants([trees[root / DECLARATION]])))
    problems += [
        f"{metric.name} is declared in worker/telemetry/metric_names.py but named nowhere else"
        for metric in declared
        if metric.name not in named
    ]
    return problems


def _constants(trees: Iterable[ast.Module]) -> Mapping[str, set[str]]:
    """The modules' ``NAME = "Value"`` constants: each name's values."""
    constants: dict[str, set[str]] = {}
    for tree in trees:
        for node in tree.body:
            match node:
                case ast.Assign(targets=[ast.Name(id=name)], value=ast.Constant(value=str(text))):
                    constants.setdefault(name, set()).add(text)
    return constants


def _recorded(
    trees: Mapping[Path, ast.Module], root: Path, constants: Mapping[str, set[str]]
) -> Iterator[tuple[str, str]]:
    """(metric, ``path:line``) for each metric's name given first to a recording method: a
    literal, or a module's constant (bare or as a module's attribute), through either branch
    of a conditional; a string that does not look like a metric's name (``text.count("\\n")``)
    is not one. A parameter passed on is the caller's: its call site is the one checked."""
    for path, tree in trees.items():
        for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
            func = call.func
            if not (isinstance(func, ast.Attribute) and func.attr in RECORDING_METHODS):
                continue
            if not call.args:
                continue
            where = f"{path.relative_to(root.parent)}:{call.lineno}"
            for name in sorted(_strings(call.args[0], constants)):
                if METRIC_NAME.fullmatch(name):
                    yield name, where


def _strings(node: ast.expr, constants: Mapping[str, set[str]]) -> set[str]:
    match node:
        case ast.Constant(value=str(text)):
            return {text}
        case ast.Name(id=name) | ast.Attribute(attr=name):
            return constants.get(name, set())
        case ast.IfExp(body=body, orelse=orelse):
            return _strings(body, constants) | _strings(orelse, constants)
    return set()


def _named(trees: Iterable[ast.Module], declared: Mapping[str, set[str]]) -> Iterator[str]:
    """The value of each of the declaration's constants wherever the code uses it (an
    import is not a use), and each literal that looks like a metric's name."""
    for tree in trees:
        for node in ast.walk(tree):
            match node:
                case ast.Name(id=name) | ast.Attribute(attr=name) if name in declared:
                    yield from declared[name]
                case ast.Constant(value=str(text)) if METRIC_NAME.fullmatch(text):
                    yield text
