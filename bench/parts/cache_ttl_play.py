"""Issue 24's new default through the real worker: part 8's 200 conversations played in the
cache-aligned mode (fold-lagged summary, ``HISTORY_CACHE_TTL=adaptive``) with ``sent_at``
and ``created_at`` in the virtual time of the mixed pace population, every payload's
``converse`` view compared byte for byte with the pure pipeline's
(:mod:`bench.parts.cache_ttl_study`, contender ``both``), and the worker's AWS calls per
command counted.

When every view is identical, the pure pipeline's figures for the contender are the
worker's, and the study's other contenders run on the same code. Run::

    .venv/bin/python -m bench.parts.cache_ttl_play [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.load.replay import replayed_conversations, turn_times
from bench.parts.cache_bill import ViewCodec
from bench.parts.cache_ttl_study import BASELINE_RULES, SEED, _ttls_for, conversation_turns
from bench.parts.model_bill_play import converse_digest, play
from worker.caching.bill_model import PromptCache, price_turn
from worker.memory.converse import with_cache_ttls
from worker.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
PAUSES = "mixed"
LANES = 40


def expected_digests(conversations: Sequence[Any]) -> dict[str, list[bytes]]:
    """The pure pipeline's ``both`` views under the mixed paces, as digests."""
    settings = Settings.at_defaults()
    out: dict[str, list[bytes]] = {}
    for conversation in conversations:
        cid = conversation.conversation_id
        turns = conversation_turns(
            conversation,
            limits=settings.window_limits,
            fold=settings.fold_limits,
            headroom=settings.anchor_headroom,
        )
        times = turn_times(cid, conversation.turns, PAUSES, seed=SEED)
        cache, digests = PromptCache(), []
        for index, turn in enumerate(turns):
            ttls = _ttls_for("both", turn, "lagged", times=times, index=index,
                             rules=BASELINE_RULES, cache=cache)  # fmt: skip
            view = (
                turn.views["lagged"]
                if ttls is None
                else with_cache_ttls(turn.views["lagged"], ttls)
            )
            _, cache = price_turn(cache, view.system, view.messages, at=times[index],
                                  rules=BASELINE_RULES)  # fmt: skip
            digests.append(
                converse_digest({"system": list(view.system), "messages": list(view.messages)})
            )
        out[cid] = digests
    return out


async def measure(clients: Any, servers: Any, *, quick: bool, say: Any) -> dict[str, Any]:
    conversations = replayed_conversations(200, seed=SEED)
    if quick:
        conversations = conversations[::10]
    workdir = REPO_ROOT / ".bench" / "run"
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    result = await play(clients, servers, conversations, mode="cache-aligned", lanes=LANES,
                        workdir=workdir, codec=ViewCodec(), say=say, seed=SEED,
                        pauses=PAUSES)  # fmt: skip
    say("the pure pipeline on the same histories and times")
    expected = expected_digests(conversations)
    identical = turns = 0
    for cid, played in result.turns.items():
        for i, turn in enumerate(played):
            turns += 1
            identical += turn.digest == expected[cid][i]
    outcomes: dict[str, int] = {}
    for outcome, _ in result.anchors.values():
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {
        "command": "python -m bench.parts.cache_ttl_play" + (" --quick" if quick else ""),
        "pauses": PAUSES,
        "conversations": len(conversations),
        "turns": turns,
        "identical_views": identical,
        "seconds": result.seconds,
        "calls": dict(result.calls),
        "calls_per_command": sum(result.calls.values()) / max(1, result.commands),
        "calls_per_command_by_operation": {
            k: v / max(1, result.commands) for k, v in sorted(result.calls.items())
        },
        "outcomes": dict(sorted(outcomes.items())),
        "unexpected_requests": result.unexpected_requests,
        "mismatched_requests": result.mismatched_requests,
        "exit_code": result.exit_code,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="every 10th conversation")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:6.0f} s] {message}", flush=True)

    from bench.servers.servers import measured_on_local_servers

    document = measured_on_local_servers(
        lambda clients, servers: measure(clients, servers, quick=args.quick, say=say)
    )
    text = json.dumps(document, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
