"""Part 6's table and section: unfolded messages outside the window, per profile and
compactor lag (how the model works: docs/benchmarks/method.md, "The fold gap").

Renders the figures :mod:`bench.parts.fold_gap` measured; imports nothing else of ``bench``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The compactor lags the report shows (the part measures 0-5).
REPORTED_LAGS = (1, 3, 5)
#: Profiles whose conversations must show no gap at all up to lag 3.
NO_GAP = ("tiny", "paste-heavy")


def table(doc: dict[str, Any], lags: Sequence[int] = REPORTED_LAGS) -> list[str]:
    """Markdown: gap message-turns per profile and lag (in brackets the turns with a gap)
    and the fold requests sent."""
    head = " | ".join(f"lag {lag}" for lag in lags)
    lines = [f"| profile | {head} |", "| --- |" + " ---: |" * len(lags)]
    for profile, by_lag in doc["profiles"].items():
        cells = []
        for lag in lags:
            run = by_lag[str(lag)]["pipelined"]
            turns = f" ({run['turns_with_gap']} turns)" if run["turns_with_gap"] else ""
            cells.append(f"**{run['gap_message_turns']}**{turns}, {run['requests']} requests")
        lines.append(f"| {profile} | " + " | ".join(cells) + " |")
    return lines


def gap(doc: dict[str, Any], profile: str, lag: int) -> int:
    return int(doc["profiles"][profile][str(lag)]["pipelined"]["gap_message_turns"])


def targets(doc: dict[str, Any]) -> list[tuple[str, str, bool]]:
    out = []
    for profile in NO_GAP:
        worst = max(gap(doc, profile, lag) for lag in range(4))
        out.append((f"no unfolded message outside the window, {profile} conversations, lag ≤ 3",
                    f"{worst} message-turns (worst lag)", worst == 0))  # fmt: skip
    return out


def section(doc: dict[str, Any]) -> list[str]:
    return [
        "## 6. The fold gap: unfolded messages held by neither window nor fold",
        "",
        f"Reproduce: `{doc['command']}` (deterministic, about a second: no servers). "
        f"{doc['turns']} turns per conversation, seed {doc['seed']}; the worker's own window, "
        "trigger and gap functions fed one page of the history as the stage reads it, a "
        "compactor serving each request *lag* turns late. Gap in message-turns (unfolded "
        "messages outside the window, summed over the turns), and the fold requests sent:",
        "",
        *table(doc),
        "",
        "| target | measured | |",
        "| --- | --- | --- |",
        *(
            f"| {target} | {figure} | {'met' if met else '**missed**'} |"
            for target, figure, met in targets(doc)
        ),
    ]
