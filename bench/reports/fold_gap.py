"""Part 6's table: unfolded messages outside the window, per profile and compactor lag.

Renders the figures :mod:`bench.parts.fold_gap` measured; imports nothing else of ``bench``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The compactor lags the report shows (the part measures 0-5).
REPORTED_LAGS = (1, 3, 5)


def table(doc: dict[str, Any], lags: Sequence[int] = REPORTED_LAGS) -> list[str]:
    """Markdown: gap message-turns per profile and lag, pipelined beside single-request."""
    head = " | ".join(f"lag {lag}: pipelined / single" for lag in lags)
    lines = [f"| profile | {head} |", "| --- |" + " ---: |" * len(lags)]
    for profile, by_lag in doc["profiles"].items():
        cells = []
        for lag in lags:
            run = by_lag[str(lag)]
            new, old = run["pipelined"], run["single"]
            cells.append(
                f"**{new['gap_message_turns']}** / {old['gap_message_turns']}"
                + (
                    f" ({new['turns_with_gap']} / {old['turns_with_gap']} turns)"
                    if new["turns_with_gap"] or old["turns_with_gap"]
                    else ""
                )
            )
        lines.append(f"| {profile} | " + " | ".join(cells) + " |")
    return lines
