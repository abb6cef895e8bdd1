"""The dashboard drawn from a run (:mod:`bench.parts.dashboard_run`): the panels of
``infra/k8s/cloudwatch-dashboard.json`` (the widgets the template deploys, without what only
the stack has), in their order and with their titles, lines, statistics and alarm lines, each
computed from the worker's EMF documents as CloudWatch computes it from the same documents.

What differs from CloudWatch, and says so on the picture: a period of the dashboard's 60 s is
one interval of the run's ``METRICS_FLUSH_SECONDS`` (and the hour of the unexplained share
sixty of them); the AWS/SQS metrics are the queues' ``ApproximateNumberOfMessages`` read from
the moto server every second (``ApproximateAgeOfOldestMessage`` is CloudWatch's alone: not
drawn); the metrics are matched by name and dimensions, the run's queue name aside.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
WIDGETS = REPO_ROOT / "infra" / "k8s" / "cloudwatch-dashboard.json"
STAGE = "Mira/ConverseStage"
#: The stage's own dimensions, set by the worker; any other is a metric's split.
OWN_DIMENSIONS = ("Service", "Queue")
#: Each expression of the dashboard, as a function of the lines it names (by id).
EXPRESSIONS: Mapping[str, Callable[[Mapping[str, float]], float]] = {
    "IF(checks >= 20, 100 * FILL(unexplained, 0) / checks, 0)": lambda v: (
        100 * v.get("unexplained", 0.0) / v["checks"] if v.get("checks", 0.0) >= 20 else 0.0
    ),
}
_CEIL = re.compile(r"CEIL\((\w+) / (\d+)\)")

Series = dict[float, float]


def statistic(values: Sequence[float], stat: str) -> float:
    if stat == "Sum":
        return float(sum(values))
    if stat == "Maximum":
        return float(max(values))
    if stat == "Average":
        return float(sum(values) / len(values))
    if stat == "SampleCount":
        return float(len(values))
    if stat.startswith("p"):  # nearest rank, as CloudWatch's percentiles of raw values
        ordered = sorted(values)
        return float(ordered[max(0, math.ceil(float(stat[1:]) / 100 * len(ordered)) - 1)])
    raise ValueError(f"no rendering for the statistic {stat}")


def stage_series(
    documents: Sequence[Mapping[str, Any]],
    name: str,
    split: Mapping[str, str],
    stat: str,
    bucket: float,
    start: float,
) -> Series:
    """One metric of the stage (with ``split``: its documents per that dimension's value)
    by bucket of ``bucket`` seconds from ``start``: the statistic of the values in each."""
    values: dict[float, list[float]] = defaultdict(list)
    for document in documents:
        extra = {k: document[k] for d in _dimension_sets(document) for k in d}
        extra = {k: v for k, v in extra.items() if k not in OWN_DIMENSIONS}
        if extra != dict(split) or name not in document:
            continue
        at = document["_aws"]["Timestamp"] / 1000 - start
        value = document[name]
        values[bucket * math.floor(at / bucket)] += value if isinstance(value, list) else [value]
    return {at: statistic(found, stat) for at, found in sorted(values.items())}


def _dimension_sets(document: Mapping[str, Any]) -> list[list[str]]:
    return [s for d in document["_aws"]["CloudWatchMetrics"] for s in d["Dimensions"]]


def queue_series(
    samples: Mapping[str, Sequence[Sequence[float]]], queue: str, bucket: float, start: float
) -> Series:
    """A queue's visible messages (the sampled queue whose role ends the dashboard's queue
    name: ``mira-converse-dlq`` is the run's ``…-converse-dlq``), the most in each bucket."""
    role = max((r for r in samples if queue.endswith(f"-{r}")), key=len, default=None)
    if role is None:
        return {}
    values: dict[float, list[float]] = defaultdict(list)
    for at, visible in samples[role]:
        values[bucket * math.floor((at - start) / bucket)].append(visible)
    return {at: float(max(found)) for at, found in sorted(values.items())}


def panel_lines(
    properties: Mapping[str, Any], figures: Mapping[str, Any]
) -> list[tuple[str, Series, bool]]:
    """Each visible line of a metric widget: (label, series, on the right axis)."""
    bucket = figures["flush_seconds"] * properties["period"] / 60
    start = figures["started"]
    by_id: dict[str, Series] = {}
    lines = []
    for metric in properties["metrics"]:  # written out: no CloudWatch shorthand
        options = metric[-1] if isinstance(metric[-1], dict) else {}
        items = metric[:-1] if options else metric
        if not items:
            series = _expression(options["expression"], by_id)
        else:
            namespace, name, *pairs = items
            dimensions = dict(zip(pairs[::2], pairs[1::2], strict=True))
            stat = options.get("stat", properties["stat"])
            if namespace == STAGE:
                split = {k: v for k, v in dimensions.items() if k not in OWN_DIMENSIONS}
                series = stage_series(figures["documents"], name, split, stat, bucket, start)
            elif namespace == "AWS/SQS" and name == "ApproximateNumberOfMessagesVisible":
                series = queue_series(figures["depths"], dimensions["QueueName"], bucket, start)
            else:
                series = {}
        if "id" in options:
            by_id[options["id"]] = series
        if options.get("visible", True):
            label = options.get("label") or (items[1] if items else options["expression"])
            lines.append((label, series, options.get("yAxis") == "right"))
    return lines


def _expression(expression: str, by_id: Mapping[str, Series]) -> Series:
    if match := _CEIL.fullmatch(expression):
        name, per = match.groups()
        return {at: float(math.ceil(v / int(per))) for at, v in by_id[name].items()}
    compute = EXPRESSIONS[expression]  # a new expression must be taught here
    moments = sorted({at for series in by_id.values() for at in series})
    return {at: compute({k: s[at] for k, s in by_id.items() if at in s}) for at in moments}


def render(figures: Mapping[str, Any], path: Path, widgets: Path = WIDGETS) -> None:
    """The panels, one row of the page per row of the dashboard, into ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: list[tuple[str, list[dict[str, Any]]]] = []
    for widget in json.loads(widgets.read_text())["widgets"]:
        if widget["type"] == "text":
            rows.append((widget["properties"]["markdown"], []))
        elif widget["type"] == "metric":
            rows[-1][1].append(widget["properties"])
    columns = max(len(panels) for _, panels in rows)
    fig = plt.figure(figsize=(4.6 * columns, 3.4 * len(rows)), dpi=110, layout="constrained")
    for (heading, panels), sub in zip(rows, fig.subfigures(len(rows), 1), strict=True):
        sub.suptitle(heading.replace("**", ""), x=0.01, ha="left", fontsize=11, fontweight="bold")
        for column, ax in enumerate(sub.subplots(1, columns)):
            if column < len(panels):
                _draw(ax, panels[column], figures)
            else:
                ax.axis("off")
    fig.supxlabel(
        f"seconds into the run: {figures['conversations']} conversations x {figures['turns']} "
        f"turns through `worker run` on moto, {figures['seconds']:.0f} s, one point per "
        f"{figures['flush_seconds']} s interval (the dashboard's minute); SQS depths sampled "
        "from moto every second; SQS ages and ECS's tasks are CloudWatch's own, not drawn",
        fontsize=8,
        color="0.35",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _draw(ax: Any, properties: Mapping[str, Any], figures: Mapping[str, Any]) -> None:
    right = None
    for number, (label, series, on_right) in enumerate(panel_lines(properties, figures)):
        target = ax
        if on_right:
            right = right or ax.twinx()
            target = right
        xs, ys = list(series), list(series.values())
        style = "o" if len(xs) == 1 else ("-", "--", "-.", ":")[number % 4]  # equal lines show
        target.plot(xs, ys, style, lw=1.2, ms=4, label=label if xs else f"{label} (no data)")
    alarms: dict[tuple[float, bool], list[str]] = defaultdict(list)
    for annotation in properties.get("annotations", {}).get("horizontal", []):
        on_right = annotation.get("yAxis") == "right" and right is not None
        alarms[annotation["value"], on_right].append(annotation["label"])
    for (value, on_right), labels in alarms.items():  # one line for the alarms at one value
        target = right if on_right else ax
        target.axhline(value, color="tab:red", lw=0.8, ls=":")
        target.annotate(
            ", ".join(labels),
            xy=(0.99, value),
            xycoords=("axes fraction", "data"),
            ha="right",
            va="bottom",
            fontsize=6,
            color="tab:red",
        )
    ax.set_title(properties["title"], fontsize=9)
    ax.set_xlim(0, figures["seconds"])
    ax.set_ylim(bottom=0)
    ax.tick_params(labelsize=7)
    handles, labels = ax.get_legend_handles_labels()
    if right is not None:
        right.set_ylim(bottom=0)
        right.tick_params(labelsize=7)
        more = right.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels, fontsize=6, loc="upper left")
