"""The dashboard's picture (docs/DASHBOARD.md), from a real run: part 10's conversations
through a ``worker run`` process (:func:`bench.parts.observed_worker.through_worker`), the
model stage's stand-in answering each prompt and its writer storing the bill, with
``METRICS=emf`` every :data:`FLUSH_SECONDS`; the worker's EMF lines and the queues' depths,
sampled from the moto server meanwhile, drawn into the panels of the dashboard
(:mod:`bench.reports.dashboard`, from ``infra/k8s/cloudwatch-dashboard.json``). Run::

    .venv/bin/python -m bench.parts.dashboard_run            # ~1 min; writes the picture
    .venv/bin/python -m bench.parts.dashboard_run --quick    # 2 conversations x 10 turns

``make dashboard`` runs it after rewriting the dashboard's copies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.load.replay import ReplayedConversation
from bench.parts import observed_bill, observed_worker
from bench.servers.servers import local_servers, pointed_at

REPO_ROOT = Path(__file__).resolve().parents[2]
PICTURE = REPO_ROOT / "docs" / "dashboard.png"
#: The worker's metrics interval in the run: the dashboard's minute, shrunk to fit the run.
FLUSH_SECONDS = 1
#: How often the queues' depths are read.
SAMPLE_SECONDS = 1.0
#: The queues sampled, by their variable: the converse queue and its dead-letter queue, and
#: the model and compaction queues the dashboard reads beside them.
SAMPLED = {
    "CONVERSE_QUEUE_URL": "converse",
    "CONVERSE_DLQ_URL": "converse-dlq",
    "MODEL_QUEUE_URL": "model",
    "COMPACTION_QUEUE_URL": "compaction",
}


@dataclass
class Depths:
    """Each sampled queue's visible messages, by the seconds since the epoch they were read."""

    samples: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    async def watch(self, stack: observed_worker.Stack) -> None:
        sqs = stack.clients.sqs
        urls = {name: await _dead_letter_url(stack, variable) for variable, name in SAMPLED.items()}
        while True:
            for name, url in urls.items():
                response = await sqs.get_queue_attributes(
                    QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
                )
                visible = int(response["Attributes"]["ApproximateNumberOfMessages"])
                self.samples.setdefault(name, []).append((time.time(), visible))
            await asyncio.sleep(SAMPLE_SECONDS)


async def _dead_letter_url(stack: observed_worker.Stack, variable: str) -> str:
    """The queue of ``variable``: a source queue's own URL, or (``…_DLQ_URL``) the URL of the
    dead-letter queue its redrive policy names."""
    if variable in stack.env:
        return stack.env[variable]
    source = stack.env[variable.replace("_DLQ_URL", "_QUEUE_URL")]
    sqs = stack.clients.sqs
    attributes = await sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["RedrivePolicy"])
    arn = json.loads(attributes["Attributes"]["RedrivePolicy"])["deadLetterTargetArn"]
    return str((await sqs.get_queue_url(QueueName=arn.rsplit(":", 1)[-1]))["QueueUrl"])


def run(shape: tuple[int, int]) -> dict[str, Any]:
    """The run: the worker's EMF documents, the queues' depths, how long it took."""
    count, turns = shape
    conversations = observed_bill._conversations()
    picked = [conversations[i] for i in observed_worker.chosen(conversations, count, turns)]
    cut = [ReplayedConversation(c.conversation_id, c.messages[: 2 * turns]) for c in picked]
    depths = Depths()
    started = time.time()
    with local_servers(dynalite=False) as servers, pointed_at(servers):
        _, log = asyncio.run(
            observed_worker.through_worker(
                cut,
                turns,
                servers,
                environ={"METRICS": "emf", "METRICS_FLUSH_SECONDS": str(FLUSH_SECONDS)},
                beside=depths.watch,
            )
        )
    documents = [
        json.loads(line) for line in log.splitlines() if line.startswith("{") and '"_aws"' in line
    ]
    return {
        "conversations": count,
        "turns": turns,
        "started": started,
        "seconds": time.time() - started,
        "flush_seconds": FLUSH_SECONDS,
        "documents": documents,
        "depths": depths.samples,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="2 conversations x 10 turns")
    parser.add_argument("--out", type=Path, default=PICTURE, help=f"default {PICTURE}")
    args = parser.parse_args(argv)
    from bench.reports import dashboard

    shape = observed_worker.QUICK if args.quick else observed_worker.FULL
    figures = run(shape)
    dashboard.render(figures, args.out)
    print(
        f"{shape[0]} conversations x {shape[1]} turns through the worker in "
        f"{figures['seconds']:.0f} s, {len(figures['documents'])} EMF documents: wrote {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
