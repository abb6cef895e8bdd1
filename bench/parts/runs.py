"""One contender's run against the local servers, as parts 2-5 and 7 start it: fresh queues
and the contender's environment, the contender of each kind, its warm-up."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.contenders import contenders
from bench.load.traffic import Drain, feed_closed_loop
from bench.load.workload import (
    Command,
    Conversation,
    TextSource,
    expected_payload,
    fold_through,
    mixed_conversations,
    seed,
)
from bench.servers.servers import Servers, create_bench_resources, create_table

TABLE = "bench-history"
REPO_ROOT = Path(__file__).resolve().parents[2]
WORK_DIR = REPO_ROOT / ".bench" / "run"
#: Commands one worker handles at once in parts 3 and 4: two full SQS batches.
CONCURRENCY = 20

Contender = contenders.Contender | contenders.Group


class Progress:
    """Prints a part's progress lines, each behind the minutes and seconds since it began."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] {message}", flush=True)


@dataclass(frozen=True, slots=True)
class Seeded:
    """The conversations written to the history table, by id; the text their commands are
    drawn from; the items written."""

    conversations: dict[str, Conversation]
    text: TextSource
    items: int

    @property
    def pool(self) -> list[Conversation]:
        return list(self.conversations.values())


async def seeded(clients: Any, count: int, *, prefix: str = "matter") -> Seeded:
    """``count`` mixed conversations (:func:`mixed_conversations`) written to the history
    table :data:`TABLE`, which is made first if it is not there: where every part that runs
    contenders starts. Each row makes its own queues (:func:`queues`)."""
    if TABLE not in (await clients.dynamodb.list_tables())["TableNames"]:
        await create_table(clients.dynamodb, TABLE)
    built, text = mixed_conversations(count, prefix=prefix)
    items = await seed(clients.dynamodb, TABLE, built)
    return Seeded({c.conversation_id: c for c, _ in built}, text, items)


async def queues(
    clients: Any,
    servers: Servers,
    tag: str,
    *,
    concurrency: int | None = CONCURRENCY,
    **settings: str,
) -> tuple[dict[str, str], dict[str, str]]:
    """Fresh queues named after ``tag`` on ``servers``, and the environment a contender runs
    with against them: 20 s long polls, ``concurrency`` commands at once (None: the
    worker's default), ``settings``."""
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    env = await create_bench_resources(clients, tag, TABLE)
    if concurrency is not None:
        settings["WORKER_CONCURRENCY"] = str(concurrency)
    return env, servers.child_environ(**env, RECEIVE_WAIT_SECONDS="20", **settings)


def write_json(path: Path, document: Any) -> None:
    """``document`` as indented JSON at ``path`` (its folder made): every part's figures."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def make(
    kind: str,
    env: dict[str, str],
    name: str,
    conversations: dict[str, Conversation],
    commands: Sequence[Command],
    checkouts: Mapping[str, Path] | None = None,
) -> Contender:
    """The contender of ``kind`` for one run: ``worker``, ``naive``, ``replay``, or
    ``worker-x2`` (two worker processes on one stack), ``worker-unclaimed`` (a study: the
    worker with its claims granted without the call), or ``worker@<label>``: the worker of
    the checkout ``checkouts[label]``. The replay gets the stage's payloads of ``commands``
    (warm-up and measured) precomputed."""
    if kind.startswith("worker@"):
        checkout = (checkouts or {})[kind.removeprefix("worker@")]
        return contenders.worker(env, WORK_DIR, name, checkout=checkout)
    if kind == "naive":
        return contenders.process("bench.contenders.naive_consumer", env, WORK_DIR, name)
    if kind == "replay":
        payloads = WORK_DIR / f"{name}.payloads.json"
        table = {
            c.command_id: [
                c.conversation_id,
                expected_payload(c, conversations[c.conversation_id]),
                fold_through(conversations[c.conversation_id]),
            ]
            for c in commands
        }
        payloads.write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")
        lanes = str(CONCURRENCY // 10)
        return contenders.process(
            "bench.contenders.api_replay",
            env,
            WORK_DIR,
            name,
            "--payloads",
            str(payloads),
            "--lanes",
            lanes,
            "--batch",
            "10",
        )
    if kind == "worker-unclaimed":  # a study: the claim granted without its call
        return contenders.worker({**env, contenders.UNCLAIMED_ENV: "1"}, WORK_DIR, name)
    if kind == "worker-x2":
        members = [contenders.worker(env, WORK_DIR, f"{name}-{i}") for i in range(2)]
        return contenders.Group(name, members)
    return contenders.worker(env, WORK_DIR, name)


async def warmed_up(
    contender: Contender,
    sqs: Any,
    url: str,
    drain: Drain,
    warmup: Sequence[Command],
    *,
    window: int = 20,
) -> dict[str, Any]:
    """Start ``contender`` and serve ``warmup`` through it; its snapshot once they arrived."""
    contender.start()
    await feed_closed_loop(sqs, url, warmup, drain, window=window)
    if not await drain.wait_for([c.command_id for c in warmup], within=60):
        raise RuntimeError(f"{contender.name}: warm-up did not finish\n{contender.log_tail()}")
    return await contender.snapshot()


async def arrived(drain: Drain, commands: Sequence[Command], within: float, name: str) -> None:
    if not await drain.wait_for([c.command_id for c in commands], within=within):
        raise RuntimeError(f"{name}: commands did not all arrive within {within:g} s")
