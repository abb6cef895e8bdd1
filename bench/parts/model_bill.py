"""Part 8 of ``make bench``: the model's input bill, priced turn by turn (issue 19).

The benchmark's conversations are played from their first message through the real
worker, once in each ``HISTORY_WINDOW_MODE`` (:mod:`bench.parts.model_bill_play`), and
every prompt payload's ``converse`` view is priced with the prompt-cache model of
:mod:`worker.caching.bill_model`, one cache per conversation, at the times a pause model
gives the turns. Four contenders on the same histories and fold schedule:

- ``sliding``: the worker in sliding mode (a cache point after the summary only);
- ``cache-aligned``: the worker in cache-aligned mode;
- ``sliding+point``: the sliding window with the history's cache points (rendered);
- ``stepped``: the peer to beat, a window whose start moves on a grid of ``STEP`` tokens
  (:func:`bench.parts.cache_bill.stepped_window`), with the history's cache points.

The last two are not modes of the worker, so a pure pipeline renders them: the worker's
own memory functions over the same histories and fold schedule
(:func:`model_conversation`). The same pipeline renders the two modes too, and every one of
its views is checked to be byte-identical to the worker's payload of that turn.

The recorded views are then priced again under each sensitivity case (the minimum
prefix, the model stage's system prompt, the TTL, the pauses) without running the worker
again. Run::

    .venv/bin/python -m bench.parts.model_bill            # ~10 min: writes docs/benchmarks/
                                                          # model_bill.{json,md,png}
    .venv/bin/python -m bench.parts.model_bill --quick    # ~1.5 min: .bench/quick/benchmarks/

``make bench`` (:mod:`bench.run_all`) runs it as part 8 and puts its section in
docs/BENCHMARKS.md (:mod:`bench.reports.model_bill`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.load.replay import (
    PAUSE_MODELS,
    FoldTrack,
    ReplayedConversation,
    ScriptedCompactor,
    replayed_conversations,
    turn_times,
)
from bench.parts.cache_bill import (
    Tally,
    ViewCodec,
    aligned_window,
    sliding_window,
    stepped_window,
)
from bench.parts.model_bill_play import (
    PlayedTurn,
    PlayResult,
    command_id,
    converse_digest,
    play,
)
from worker.caching.anchor import AnchorHeadroom, WindowAnchor
from worker.caching.bill_model import CacheRules, PromptCache, price_turn
from worker.memory import (
    FoldLimits,
    Window,
    WindowLimits,
    fold_gap,
    render_converse,
)
from worker.memory.converse import (
    ConverseView,
    cache_point_prefixes,
    previous_history_end,
    with_cache_ttls,
)
from worker.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
FULL_OUT_DIR = REPO_ROOT / "docs" / "benchmarks"
QUICK_OUT_DIR = REPO_ROOT / ".bench" / "quick" / "benchmarks"
WORK_DIR = REPO_ROOT / ".bench" / "run"
STEM = "model_bill"
Say = Callable[[str], None]

MODES = ("sliding", "cache-aligned")
CONTENDERS = ("sliding", "sliding+point", "cache-aligned", "stepped")
#: The stepped peer's grid, in estimated tokens of history (``PROMPT-CACHE.md``).
STEP = 2_000
#: Conversations played at once (each one sequential): about 80 turns/s here, queues
#: shallow (moto's SQS slows with depth).
LANES = 40
SEED = 11
#: The quick run: every tenth conversation of the workload.
QUICK_EVERY = 10

#: Claude Sonnet's input price on Bedrock and at Anthropic, US dollars per million tokens
#: (Anthropic's pricing page; Amazon Bedrock pricing): a cache write bills 1.25x of it
#: (5-minute TTL) or 2x (1 hour), a cache read 0.1x; the billed units carry those multipliers.
INPUT_DOLLARS_PER_MTOK = 3.0

#: The baseline: Claude Sonnet 4's minimum (1,024 tokens), the default TTL, the model
#: stage's system prompt (300 tokens) first with a cache point of its own, and counsel
#: working in sessions (:data:`bench.load.replay.PAUSE_MODELS`).
BASELINE_RULES = CacheRules(
    min_prefix_tokens=1024, ttl="5m", system_prompt_tokens=300, system_prompt_cache_point=True
)
BASELINE_PAUSES = "sessions"


@dataclass(frozen=True, slots=True)
class Case:
    """One pricing of the recorded views: the cache's rules and the pause model."""

    name: str
    rules: CacheRules
    pauses: str


CASES = (
    Case("baseline", BASELINE_RULES, BASELINE_PAUSES),
    Case("minimum 2,048 tokens", replace(BASELINE_RULES, min_prefix_tokens=2048), BASELINE_PAUSES),
    Case("minimum 4,096 tokens", replace(BASELINE_RULES, min_prefix_tokens=4096), BASELINE_PAUSES),
    Case(
        "no system prompt of the model stage",
        replace(BASELINE_RULES, system_prompt_tokens=0, system_prompt_cache_point=False),
        BASELINE_PAUSES,
    ),
    Case(
        "system prompt 1,500 tokens", replace(BASELINE_RULES, system_prompt_tokens=1500), "sessions"
    ),
    Case("TTL 1 hour", replace(BASELINE_RULES, ttl="1h"), BASELINE_PAUSES),
    Case("pauses: one long session", BASELINE_RULES, "brisk-sessions"),
    Case("pauses: interrupted", BASELINE_RULES, "interrupted"),
    Case("pauses: cold", BASELINE_RULES, "cold"),
    Case("TTL 1 hour, pauses interrupted", replace(BASELINE_RULES, ttl="1h"), "interrupted"),
    Case("TTL 1 hour, pauses cold", replace(BASELINE_RULES, ttl="1h"), "cold"),
)


@dataclass(frozen=True, slots=True)
class TurnView:
    """One contender's prompt on one turn, as priced, and what its window held."""

    view: array[int]  # encoded with the run's :class:`ViewCodec`
    kept: int
    estimated_tokens: int
    fold_gap: bool  # an unfolded message outside the window
    outcome: str = ""  # cache-aligned: kept / reanchored:<reason> / fallback
    wrote: bool = False  # cache-aligned: the anchor was stored


@dataclass
class ModelRun:
    """The pure pipeline on one conversation: the two modelled contenders' turns, and the
    two modes' views (digests), fold marks and requests, to check the worker against."""

    views: dict[str, list[TurnView]]
    digests: dict[str, list[bytes]]
    folded_through: list[int]
    requests: list[int | None]


def model_conversation(
    conversation: ReplayedConversation,
    codec: ViewCodec,
    *,
    limits: WindowLimits,
    fold: FoldLimits,
    headroom: AnchorHeadroom,
    step: int = STEP,
    seed: int = SEED,
) -> ModelRun:
    """Every turn of ``conversation`` through the worker's memory functions, fed as the
    stage feeds them (one page; the anchor kept between turns as the ``state`` item keeps
    it), with the scripted compactor and writer of the play."""
    track = FoldTrack(ScriptedCompactor(conversation.conversation_id, seed))
    cumulative = conversation.cumulative_tokens(limits.message_max_tokens)
    run = ModelRun({"sliding+point": [], "stepped": [], "cache-aligned": []},
                   {mode: [] for mode in MODES}, [], [])  # fmt: skip
    anchor: WindowAnchor | None = None
    for turn in range(1, conversation.turns + 1):
        track.before_turn(turn)
        history = conversation.history(turn)
        current = conversation.question(turn).content
        folded, summary = track.folded_through, track.summary
        page = tuple(reversed(history[-(limits.max_messages + 1) :]))
        sliding = sliding_window(history, page, limits)
        aligned = aligned_window(
            history, page, limits, folded=folded, summary=summary, anchor=anchor, headroom=headroom
        )
        # Stored only when it differs from the stored one (the stage's anchor_to_write).
        new = aligned.anchor_to_store
        wrote = new is not None and new != anchor
        if wrote:
            anchor = new
        plan = track.due(history, limits, fold)
        if plan is not None:
            track.requested(turn, plan.through)
        run.folded_through.append(folded)
        run.requests.append(plan.through if plan is not None else None)
        run.digests["sliding"].append(_digest(render_converse(sliding, current, summary)))
        # The worker plays with HISTORY_CACHE_TTL=5m here (part 8's pauses carry no
        # timestamps; issue 24's adaptive TTLs are bench/parts/cache_ttl_study.py's), and
        # shows the summary in force (fold-lagged).
        aligned_view = _with_points(aligned.window, current, aligned.shown.summary)
        aligned_view = with_cache_ttls(
            aligned_view, ("5m",) * len(cache_point_prefixes(aligned_view))
        )
        run.digests["cache-aligned"].append(_digest(aligned_view))
        outcome = aligned.outcome + (f":{aligned.reason}" if aligned.reason else "")
        run.views["cache-aligned"].append(
            _turn_view(codec, aligned_view, aligned.window, folded, outcome, wrote)
        )  # fmt: skip
        run.views["sliding+point"].append(
            _turn_view(codec, _with_points(sliding, current, summary), sliding, folded)
        )
        stepped = stepped_window(history, cumulative, limits, step)
        run.views["stepped"].append(
            _turn_view(codec, _with_points(stepped, current, summary), stepped, folded)
        )
    return run


def _with_points(window: Window, current: str, summary: str | None) -> ConverseView:
    return render_converse(
        window,
        current,
        summary,
        cache_history=True,
        previous_history_end=previous_history_end(window),
    )


def _digest(view: ConverseView) -> bytes:
    return converse_digest({"system": list(view.system), "messages": list(view.messages)})


def _turn_view(
    codec: ViewCodec,
    view: ConverseView,
    window: Window,
    folded: int,
    outcome: str = "",
    wrote: bool = False,
) -> TurnView:
    return TurnView(
        view=codec.encode(view.system, view.messages),
        kept=window.kept,
        estimated_tokens=window.estimated_tokens,
        fold_gap=fold_gap(window, folded) is not None,
        outcome=outcome,
        wrote=wrote,
    )


def played_views(
    conversation_id: str, turns: Sequence[PlayedTurn], anchors: dict[str, tuple[str, bool]]
) -> list[TurnView]:
    """The worker's turns as priced, with the anchor outcome its log gave for each."""
    out = []
    for played in turns:
        gap = played.oldest_seq is not None and played.oldest_seq - 1 > played.folded_through
        outcome, wrote = anchors.get(command_id(conversation_id, played.turn), ("", False))
        out.append(TurnView(played.view, played.kept, played.estimated_tokens, gap, outcome, wrote))
    return out


# -- pricing ---------------------------------------------------------------------------------


def price(
    streams: dict[str, dict[str, list[TurnView]]],
    codec: ViewCodec,
    rules: CacheRules,
    times: dict[str, list[float]],
) -> dict[str, Tally]:
    """Each contender's turns priced under ``rules``: one prompt cache per conversation,
    turn ``i`` of conversation ``c`` sent ``times[c][i]`` seconds into the replay. The
    messages fewer are counted against the ``sliding`` stream's window, turn by turn."""
    base = streams["sliding"]
    tallies: dict[str, Tally] = {}
    for name, by_conversation in streams.items():
        tally = tallies[name] = Tally()
        for cid, turns in by_conversation.items():
            cache = PromptCache()
            for i, turn in enumerate(turns):
                system, messages = codec.decode(turn.view)
                cost, cache = price_turn(cache, system, messages, at=times[cid][i], rules=rules)
                tally.add_cost(cost)
                tally.history_tokens += turn.estimated_tokens
                tally.fold_gap_turns += turn.fold_gap
                tally.anchor_writes += turn.wrote
                tally.fewer_messages.append(base[cid][i].kept - turn.kept)
                if turn.outcome:
                    tally.outcomes[turn.outcome] += 1
    return tallies


def case_times(case: Case, conversations: Sequence[ReplayedConversation]) -> dict[str, list[float]]:
    """When each turn is sent under the case's pause model (seeded per conversation)."""
    return {
        c.conversation_id: turn_times(c.conversation_id, c.turns, case.pauses, seed=SEED)
        for c in conversations
    }


def figures(tally: Tally, base: Tally) -> dict[str, Any]:
    """One contender's row: per turn, and as a share of the sliding window's."""
    p50, p90, most = tally.fewer()
    per_turn = tally.billed / tally.turns
    return {
        "turns": tally.turns,
        "billed_per_turn": per_turn,
        "billed_share": tally.billed / base.billed,
        "read_share": tally.read_share,
        "read_per_turn": tally.read / tally.turns,
        "written_per_turn": tally.written / tally.turns,
        "uncached_per_turn": tally.uncached / tally.turns,
        "history_per_turn": tally.history_tokens / tally.turns,
        "history_share": tally.history_tokens / base.history_tokens,
        "fewer_messages": {"p50": p50, "p90": p90, "max": most},
        "fold_gap_turns": tally.fold_gap_turns,
        "reanchors_per_turn": tally.reanchors / tally.turns,
        "anchor_writes_per_turn": tally.anchor_writes / tally.turns,
        "outcomes": dict(sorted(tally.outcomes.items())),
        "dollars_per_1000_turns": per_turn * 1000 * INPUT_DOLLARS_PER_MTOK / 1e6,
    }


# -- the run ---------------------------------------------------------------------------------


def workload(quick: bool) -> tuple[list[ReplayedConversation], str]:
    everything = replayed_conversations(200, seed=SEED)
    if not quick:
        return everything, "all 200 conversations of the workload"
    subset = everything[::QUICK_EVERY]
    return subset, f"every {QUICK_EVERY}th conversation of the workload ({len(subset)})"


async def measure(
    clients: Any, servers: Any, *, quick: bool, say: Say, workdir: Path = WORK_DIR
) -> dict[str, Any]:
    """Play both modes through the worker, model the rest, price every case: the part's
    figures (JSON-ready)."""
    started = time.monotonic()
    settings = Settings.at_defaults()
    limits, fold = settings.window_limits, settings.fold_limits
    headroom = settings.anchor_headroom
    conversations, described = workload(quick)
    turns = sum(c.turns for c in conversations)
    codec = ViewCodec()
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    plays: dict[str, PlayResult] = {}
    for mode in MODES:
        say(f"part 8: the model's bill: {turns:,} turns through the worker in {mode} mode")
        plays[mode] = await play(clients, servers, conversations, mode=mode, lanes=LANES,
                                 cache_ttl="5m",
                                 workdir=workdir, codec=codec, say=say, seed=SEED)  # fmt: skip
        result = plays[mode]
        say(f"  {mode}: {result.commands:,} turns in {result.seconds:.0f} s, "
            f"{sum(result.calls.values()) / result.commands:.2f} AWS calls/command")  # fmt: skip
    say("part 8: the pure pipeline on the same histories (the stepped peer, sliding + point)")
    models = {
        c.conversation_id: model_conversation(
            c, codec, limits=limits, fold=fold, headroom=headroom, step=STEP, seed=SEED
        )
        for c in conversations
    }
    checks = cross_check(plays, models)
    streams: dict[str, dict[str, list[TurnView]]] = {name: {} for name in CONTENDERS}
    for c in conversations:
        cid, model = c.conversation_id, models[c.conversation_id]
        for mode in MODES:
            streams[mode][cid] = played_views(cid, plays[mode].turns[cid], plays[mode].anchors)
        streams["sliding+point"][cid] = model.views["sliding+point"]
        streams["stepped"][cid] = model.views["stepped"]
    del models
    say(f"part 8: pricing {len(CASES)} cases x {len(CONTENDERS)} contenders x {turns:,} turns")
    priced: list[dict[str, Any]] = []
    for case in CASES:
        tallies = price(streams, codec, case.rules, case_times(case, conversations))
        base = tallies["sliding"]
        priced.append(
            {
                "case": case.name,
                "rules": asdict(case.rules),
                "pauses": case.pauses,
                "contenders": {name: figures(tallies[name], base) for name in CONTENDERS},
            }
        )
    return {
        "command": f".venv/bin/python -m bench.parts.model_bill{' --quick' if quick else ''}",
        "quick": quick,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": time.monotonic() - started,
        "machine": _machine(),
        "workload": {
            "described": described,
            "conversations": len(conversations),
            "turns": turns,
            "lanes": LANES,
            "seed": SEED,
        },
        "settings": {
            "window": asdict(limits),
            "fold_min_tokens": fold.fold_min_tokens,
            "headroom": asdict(headroom),
            "step": STEP,
        },
        "baseline": {
            "rules": asdict(BASELINE_RULES),
            "pauses": BASELINE_PAUSES,
            "input_dollars_per_mtok": INPUT_DOLLARS_PER_MTOK,
        },
        "pause_models": {name: PAUSE_MODELS[name] for name in sorted({c.pauses for c in CASES})},
        "cases": priced,
        "plays": {mode: _play_figures(plays[mode]) for mode in MODES},
        "checks": checks,
    }


def cross_check(plays: dict[str, PlayResult], models: dict[str, ModelRun]) -> dict[str, Any]:
    """The worker's payloads against the pure pipeline, turn for turn."""
    out: dict[str, Any] = {}
    for mode, result in plays.items():
        identical = turns = folds = requests = anchors = 0
        for cid, played in result.turns.items():
            model = models[cid]
            for i, turn in enumerate(played):
                turns += 1
                identical += turn.digest == model.digests[mode][i]
                folds += turn.folded_through == model.folded_through[i]
                requests += turn.request_through == model.requests[i]
                if mode == "cache-aligned":
                    logged = result.anchors.get(command_id(cid, turn.turn))
                    expected = model.views[mode][i]
                    anchors += logged == (expected.outcome, expected.wrote)
        out[mode] = {
            "turns": turns,
            "identical_views": identical,
            "same_fold_mark": folds,
            "same_fold_request": requests,
            "same_anchor_choice": anchors if mode == "cache-aligned" else None,
            "anchor_lines": len(result.anchors),
            "unexpected_requests": result.unexpected_requests,
            "mismatched_requests": result.mismatched_requests,
            "duplicate_payloads": result.duplicate_payloads,
            "offloaded_payloads": result.offloaded_payloads,
            "exit_code": result.exit_code,
        }
    return out


def _play_figures(result: PlayResult) -> dict[str, Any]:
    commands = result.commands
    return {
        "commands": commands,
        "seconds": result.seconds,
        "commands_per_second": commands / result.seconds,
        "calls_per_command": {k: v / commands for k, v in sorted(result.calls.items())},
        "calls_in_all_per_command": sum(result.calls.values()) / commands,
        "requests_per_command": sum(result.requests.values()) / commands,
        "failed": result.failed,
        "worker_cpu_ms_per_command": 1000 * result.worker_cpu_seconds / commands,
    }


def _machine() -> dict[str, Any]:
    from importlib.metadata import version

    from bench.parts.compare_trim_messages import cpu_model

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "moto": version("moto"),
    }


def write(document: dict[str, Any], out_dir: Path, part3: dict[str, float] | None = None) -> None:
    """``model_bill.json``, ``.md`` and ``.png`` into ``out_dir``; ``part3`` is part 3's
    worker's calls per command (this run's, or the last full run's ``results.json``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{STEM}.json").write_text(
        json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    from bench.reports import model_bill as report

    if part3 is None:
        part3 = report.part3_calls(out_dir / "results.json")
    report.plot(document, out_dir / f"{STEM}.png")
    (out_dir / f"{STEM}.md").write_text(report.page(document, part3), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"every {QUICK_EVERY}th conversation")
    parser.add_argument("--out-dir", type=Path, default=None, help="where the outputs go")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="no run: write the page and plot from these figures")  # fmt: skip
    parser.add_argument("--into", type=Path, default=None,
                        help="also put the section into this BENCHMARKS.md")  # fmt: skip
    args = parser.parse_args(argv)
    out_dir: Path = args.out_dir or (QUICK_OUT_DIR if args.quick else FULL_OUT_DIR)
    started = time.monotonic()

    def say(message: str) -> None:
        elapsed = time.monotonic() - started
        print(f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] {message}", flush=True)

    if args.from_json is not None:
        document = json.loads(args.from_json.read_text(encoding="utf-8"))
    else:
        from bench.servers.servers import measured_on_local_servers

        document = measured_on_local_servers(
            lambda clients, servers: measure(clients, servers, quick=args.quick, say=say)
        )
    write(document, out_dir)
    from bench.reports import model_bill as report

    if args.into is not None:
        report.insert_section(document, args.into, out_dir)
        say(f"put the section into {args.into}")
    for line in report.verdicts(document, report.part3_calls(out_dir / "results.json")):
        print(line)
    say(f"wrote {out_dir / STEM}.json, .md and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
