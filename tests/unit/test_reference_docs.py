"""The reference pages cannot drift from the code, and every log event is declared once.

``docs/reference/`` and the generated table of ``docs/RUNBOOK.md`` are rendered from the
code (``tests/reference.py``, ``make docs``); each committed page must equal a fresh
rendering. Every ``clerk.*`` string in ``worker/`` must be declared in :mod:`worker.events`,
every declared event must be logged somewhere, and where a call site shows them, the levels
and fields it logs must be the declared ones.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import dashboard, reference
from tests.unit.conftest import append_function
from worker.events import EVENTS, LIBRARY, Event

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "worker"
TEMPLATE = ROOT / "infra" / "cloudformation" / "converse-stage.yaml"
PREFIX = "clerk."
#: The logger methods structlog and the standard library share, by the level they log at.
LEVEL_METHODS = {
    "debug": "debug",
    "info": "info",
    "warning": "warning",
    "error": "error",
    "exception": "error",
    "critical": "critical",
}


@pytest.mark.parametrize("page", sorted(reference.pages(), key=str), ids=str)
def test_each_committed_page_is_what_the_code_renders_now(page: Path) -> None:
    rendered = reference.pages()[page]
    committed = (ROOT / page).read_text() if (ROOT / page).exists() else None
    assert committed == rendered, f"{page} is stale: run `make docs` and commit the result"


def test_every_event_the_worker_logs_is_declared_and_every_declared_one_is_logged() -> None:
    assert event_problems(WORKER, EVENTS) == []


def test_the_check_fails_on_an_event_that_is_not_declared(worker_copy: Path) -> None:
    """GIVEN a copy of worker/ that logs one more event, declared nowhere, WHEN the same
    check runs on the copy, THEN it names the event, where it is logged and at which level."""
    line = append_function(
        worker_copy / "logs.py", 'get_logger().warning("clerk.converse_not_declared", count=1)'
    )

    assert event_problems(worker_copy, EVENTS) == [
        f"worker/logs.py:{line}: clerk.converse_not_declared is logged at ['warning'] but not "
        "declared in worker/events.py"
    ]


def test_the_check_fails_on_a_level_the_declaration_does_not_state(worker_copy: Path) -> None:
    line = append_function(
        worker_copy / "logs.py", 'get_logger().error("clerk.converse_worker_stopped")'
    )

    assert event_problems(worker_copy, EVENTS) == [
        f"worker/logs.py:{line}: clerk.converse_worker_stopped is logged at ['error'] but "
        "declared at ['info']",
        "clerk.converse_worker_stopped is declared at ['info'] but logged at ['error', 'info']",
    ]


def test_the_check_fails_on_a_field_the_declaration_does_not_state(worker_copy: Path) -> None:
    line = append_function(
        worker_copy / "logs.py", 'get_logger().info("clerk.converse_worker_stopped", why=1)'
    )

    assert event_problems(worker_copy, EVENTS) == [
        f"worker/logs.py:{line}: clerk.converse_worker_stopped is logged with fields ['why'] "
        "it does not declare"
    ]


def test_each_event_is_declared_once_with_a_stable_name() -> None:
    names = [event.name for event in (*EVENTS, LIBRARY)]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"clerk\.converse_[a-z_]+", event.name) for event in EVENTS)


def test_every_warning_or_error_event_says_what_the_operator_does() -> None:
    loud = [event for event in (*EVENTS, LIBRARY) if set(event.levels) - {"debug", "info"}]
    assert loud
    assert [event.name for event in loud if not event.action] == []


def test_the_runbook_has_a_section_for_every_alarm_of_the_stack() -> None:
    alarms = re.findall(
        r"^  (\w+):\n    Type: AWS::CloudWatch::Alarm$", TEMPLATE.read_text(), re.MULTILINE
    )
    sections = re.findall(r"^### (\w+)$", (ROOT / reference.RUNBOOK).read_text(), re.MULTILINE)
    assert len(alarms) >= 8
    assert sorted(alarms) == sorted(sections)


def test_each_alarms_section_links_to_the_dashboards_panel_that_draws_it() -> None:
    """Each alarm the dashboard draws (tests/infra/test_dashboard.py checks that it draws them
    all) links, from its runbook section, to that panel's heading on docs/DASHBOARD.md."""
    runbook = (ROOT / reference.RUNBOOK).read_text()
    sections = dict(re.findall(r"^### (\w+)\n(.*?)(?=^##)", runbook, re.MULTILINE | re.DOTALL))
    page = (ROOT / dashboard.PAGE).read_text()
    headings = {dashboard.anchor(panel) for panel in dashboard.panels()}
    assert headings <= {
        re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")
        for title in re.findall(r"^#+ (.+)$", page, re.MULTILINE)
    }
    links = {
        threshold.alarm: f"(DASHBOARD.md#{dashboard.anchor(panel)})"
        for panel in dashboard.panels()
        for threshold in panel.thresholds
    }
    assert sorted(links) == sorted(sections)
    assert [alarm for alarm, link in links.items() if link not in sections[alarm]] == []


def event_problems(root: Path, declared: Sequence[Event]) -> list[str]:
    """What is wrong between the ``clerk.*`` events logged under ``root`` (``worker/`` or a
    copy; its ``events.py``, the declarations, is not scanned) and ``declared``."""
    by_name: dict[str, Event] = {}
    problems = []
    for event in declared:
        if event.name in by_name:
            problems.append(f"{event.name} is declared twice in worker/events.py")
        by_name[event.name] = event
    emissions = list(scan_emissions(root))
    for emission in emissions:
        event = by_name.get(emission.name)
        if event is None:
            at = f" at {sorted(emission.levels)}" if emission.levels is not None else ""
            problems.append(
                f"{emission.where}: {emission.name} is logged{at} but not declared in "
                "worker/events.py"
            )
            continue
        if emission.levels is not None and not emission.levels <= set(event.levels):
            problems.append(
                f"{emission.where}: {emission.name} is logged at {sorted(emission.levels)} but "
                f"declared at {list(event.levels)}"
            )
        if emission.fields is not None and not emission.fields <= set(event.fields):
            problems.append(
                f"{emission.where}: {emission.name} is logged with fields "
                f"{sorted(emission.fields - set(event.fields))} it does not declare"
            )
    problems += _unlogged(by_name, emissions)
    return problems


def _unlogged(declared: Mapping[str, Event], emissions: Iterable[Emission]) -> Iterator[str]:
    """Declared events logged nowhere; and, where every call site of one shows its levels
    (or fields), declared levels (or fields) that no call site logs."""
    sites: dict[str, list[Emission]] = {name: [] for name in declared}
    for emission in emissions:
        sites.setdefault(emission.name, []).append(emission)
    for name, event in declared.items():
        logged = sites[name]
        if not logged:
            yield f"{name} is declared in worker/events.py but logged nowhere"
            continue
        if all(site.levels is not None for site in logged):
            levels = set().union(*(site.levels or () for site in logged))
            if levels != set(event.levels):
                yield f"{name} is declared at {list(event.levels)} but logged at {sorted(levels)}"
        if all(site.fields is not None for site in logged):
            fields = set().union(*(site.fields or () for site in logged))
            if unlogged := set(event.fields) - fields:
                yield f"{name} declares fields {sorted(unlogged)} that no call site logs"


@dataclass(frozen=True, slots=True)
class Emission:
    """A ``clerk.*`` string in the source; the levels and fields it is logged with where the
    call site shows them (None: not determined from the source alone)."""

    name: str
    where: str
    levels: frozenset[str] | None = None
    fields: frozenset[str] | None = None


@dataclass(slots=True)
class _Forwarder:
    """A function that logs one of its parameters as the event (``log_failure``, …)."""

    index: int
    parameter: str
    levels: set[str] = field(default_factory=set)
    fields: set[str] = field(default_factory=set)
    open_fields: bool = False
    passes_kwargs: bool = False


@dataclass(frozen=True, slots=True)
class _Logged:
    """What one call logs: its event argument, at which levels, with which fields."""

    event: ast.expr
    levels: frozenset[str]
    fields: frozenset[str]
    open_fields: bool
    splats: tuple[ast.expr, ...]


def scan_emissions(root: Path) -> Iterator[Emission]:
    """Every string constant starting with ``clerk.`` in the modules under ``root``, with the
    level and fields of the logging call that takes it as its event, where there is one."""
    trees = {
        path: ast.parse(path.read_text(), filename=str(path))
        for path in sorted(root.rglob("*.py"))
        if path != root / "events.py"
    }
    forwarders = _forwarders(trees.values())
    for path, tree in trees.items():
        logged: dict[int, _Logged] = {}
        for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
            found = _logged(call, forwarders)
            if found is not None:
                logged[id(found.event)] = found
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if not node.value.startswith(PREFIX):
                continue
            where = f"{path.relative_to(root.parent)}:{node.lineno}"
            call = logged.get(id(node))
            if call is None:
                yield Emission(node.value, where)
                continue
            open_fields = call.open_fields or bool(call.splats)
            yield Emission(
                node.value,
                where,
                levels=call.levels,
                fields=None if open_fields else call.fields,
            )


def _logged(call: ast.Call, forwarders: Mapping[str, _Forwarder]) -> _Logged | None:
    """The event a call logs, if it is a logger method or a known forwarder."""
    own = frozenset(keyword.arg for keyword in call.keywords if keyword.arg is not None)
    splats = tuple(keyword.value for keyword in call.keywords if keyword.arg is None)
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in LEVEL_METHODS and call.args:
        return _Logged(call.args[0], frozenset({LEVEL_METHODS[func.attr]}), own, False, splats)
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    forwarder = forwarders.get(name) if isinstance(name, str) else None
    if forwarder is None:
        return None
    if len(call.args) > forwarder.index:
        event: ast.expr | None = call.args[forwarder.index]
    else:
        event = next((k.value for k in call.keywords if k.arg == forwarder.parameter), None)
    if event is None:
        return None
    fields = frozenset(forwarder.fields | (own if forwarder.passes_kwargs else set()))
    return _Logged(
        event,
        frozenset(forwarder.levels),
        fields,
        forwarder.open_fields,
        splats if forwarder.passes_kwargs else (),
    )


def _forwarders(trees: Iterable[ast.Module]) -> dict[str, _Forwarder]:
    """Functions that log a parameter as the event, found to a fixed point (a function that
    passes its parameter to ``log_failure`` forwards too), by the name they are called by."""
    functions = [
        node
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    forwarders: dict[str, _Forwarder] = {}
    changed = True
    while changed:
        changed = False
        for function in functions:
            parameters = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
            if parameters[:1] in (["self"], ["cls"]):
                parameters = parameters[1:]
            kwargs = function.args.kwarg.arg if function.args.kwarg else None
            for call in (node for node in ast.walk(function) if isinstance(node, ast.Call)):
                found = _logged(call, forwarders)
                if found is None or not isinstance(found.event, ast.Name):
                    continue
                if found.event.id not in parameters:
                    continue
                forwarder = forwarders.setdefault(
                    function.name,
                    _Forwarder(parameters.index(found.event.id), found.event.id),
                )
                before = (
                    set(forwarder.levels),
                    set(forwarder.fields),
                    forwarder.open_fields,
                    forwarder.passes_kwargs,
                )
                forwarder.levels |= found.levels
                forwarder.fields |= found.fields
                forwarder.open_fields |= found.open_fields
                for splat in found.splats:
                    if isinstance(splat, ast.Name) and splat.id == kwargs:
                        forwarder.passes_kwargs = True
                    else:
                        forwarder.open_fields = True
                after = (
                    forwarder.levels,
                    forwarder.fields,
                    forwarder.open_fields,
                    forwarder.passes_kwargs,
                )
                changed |= before != after
    return forwarders
