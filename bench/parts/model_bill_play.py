"""The benchmark's conversations played turn by turn through the real worker, in one mode.

One ``worker run`` process (:func:`bench.contenders.contenders.worker`: its AWS calls
counted), SQS and S3 on the moto server, the history table on dynalite. Every
conversation starts empty and is replayed from its first message
(:mod:`bench.load.replay`); each one is sequential, and ``lanes`` of them run at once,
closed loop (moto's SQS slows with deep queues, so nothing queues up). A turn:

1. the scripted compactor lands the folds due before it (``folded_through`` and a
   300-600-token summary on the ``state`` item, only forward);
2. the converse command is sent (sends from all lanes leave in batches of up to ten);
3. the turn waits for its prompt payload on the model queue (an S3 pointer is resolved)
   and records its ``converse`` view, window and timing;
4. if the stage's own trigger says a fold request is due on this turn, the turn waits for
   it on the compaction queue and schedules its landing 1-3 turns later; a request nobody
   expected is counted, never silently absorbed;
5. the writer stores counsel's question and the scripted answer.

Nothing here prints or logs message content.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.contenders import contenders
from bench.load.replay import START, FoldTrack, ReplayedConversation, ScriptedCompactor, turn_times
from bench.load.traffic import Drain
from bench.load.workload import message_items, put_items
from bench.parts.cache_bill import ViewCodec
from bench.servers.servers import Servers, create_bench_resources
from worker.adapters.dynamodb import STATE_KEY, rfc3339
from worker.adapters.history_writer import message_item
from worker.delivery.pointers import parse_pointer
from worker.memory import FoldLimits, WindowLimits
from worker.settings import Settings

Say = Callable[[str], None]
#: Commands the worker handles at once: two full SQS batches, as in parts 3 and 4.
CONCURRENCY = 20
#: How long a turn waits for its payload, or for the fold request it expects.
TURN_TIMEOUT = 120.0


def command_id(conversation_id: str, turn: int) -> str:
    """The converse command of ``turn`` (unique per command: the ledger's key)."""
    return f"{conversation_id}-t{turn:04d}"


def converse_digest(converse: dict[str, Any]) -> bytes:
    """The view as the payload carries it (``system`` then ``messages``), serialised as
    the stage serialises it, hashed: equal digests, byte-identical views."""
    text = json.dumps(converse, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class PlayedTurn:
    """One turn as the worker served it."""

    turn: int
    folded_through: int  # the mark the compactor had landed before the turn
    oldest_seq: int | None  # the window's first seq (None: empty)
    kept: int
    estimated_tokens: int
    view: array[int]  # the payload's ``converse``, encoded (:class:`ViewCodec`)
    digest: bytes  # :func:`converse_digest` of it
    request_through: int | None  # the fold request this turn sent
    sent: float  # epoch seconds
    arrived_ms: int  # the payload's SentTimestamp on the model queue


@dataclass
class PlayResult:
    mode: str
    turns: dict[str, list[PlayedTurn]]
    seconds: float
    calls: dict[str, int]  # by "service.Operation purpose", the played turns only
    requests: dict[str, int]
    failed: dict[str, int]
    worker_cpu_seconds: float
    exit_code: int | None
    log_path: Path
    #: The worker's ``clerk.converse_window_anchor`` lines, by command id: the window's
    #: outcome (``reanchored:<reason>`` when it re-anchored) and whether it stored an anchor.
    anchors: dict[str, tuple[str, bool]] = field(default_factory=dict)
    unexpected_requests: int = 0  # fold requests the stage's trigger did not call for
    mismatched_requests: int = 0  # expected, but for another ``through``
    duplicate_payloads: int = 0
    offloaded_payloads: int = 0

    @property
    def commands(self) -> int:
        return sum(len(t) for t in self.turns.values())


@dataclass
class _Sender:
    """Converse commands from every lane, sent in batches of up to ten."""

    sqs: Any
    url: str
    linger: float = 0.003
    _queue: asyncio.Queue[tuple[str, asyncio.Future[None]]] = field(default_factory=asyncio.Queue)

    async def send(self, body: str) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put((body, done))
        await done

    async def run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            await asyncio.sleep(self.linger)
            while len(batch) < 10 and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                response = await self.sqs.send_message_batch(
                    QueueUrl=self.url,
                    Entries=[
                        {"Id": str(i), "MessageBody": body} for i, (body, _) in enumerate(batch)
                    ],
                )
                if response.get("Failed"):
                    raise RuntimeError(f"SendMessageBatch refused entries: {response['Failed']}")
            except Exception as exc:
                for _, done in batch:
                    done.set_exception(exc)
                continue
            for _, done in batch:
                done.set_result(None)


@dataclass
class _Table:
    dynamodb: Any
    name: str

    async def land(self, conversation_id: str, folded_through: int, summary: str) -> None:
        """The compactor's write: the fold mark and its summary, only forward."""
        await self.dynamodb.update_item(
            TableName=self.name,
            Key={"pk": {"S": conversation_id}, "sk": {"S": STATE_KEY}},
            UpdateExpression="SET folded_through = :f, fold_summary = :s",
            ConditionExpression="attribute_not_exists(folded_through) OR folded_through < :f",
            ExpressionAttributeValues={":f": {"N": str(folded_through)}, ":s": {"S": summary}},
        )


async def play(
    clients: Any,
    servers: Servers,
    conversations: Sequence[ReplayedConversation],
    *,
    mode: str,
    lanes: int,
    workdir: Path,
    codec: ViewCodec,
    say: Say,
    seed: int = 11,
    pauses: str | None = None,
    cache_ttl: str = "adaptive",
) -> PlayResult:
    """Every turn of ``conversations`` through one worker process in ``mode``. With
    ``pauses`` (a pause model), each command carries ``sent_at`` and each stored message
    ``created_at`` in the replay's virtual time (whole seconds from
    :data:`bench.load.replay.START`), so the cache-aligned mode reads the pace from them;
    ``cache_ttl`` is the worker's ``HISTORY_CACHE_TTL``."""
    settings = Settings.at_defaults()
    limits, fold = settings.window_limits, settings.fold_limits
    tag = f"bill-{mode}"
    env = await create_bench_resources(clients, tag, f"{tag}-history")
    child = servers.child_environ(
        **env,
        WORKER_CONCURRENCY=str(CONCURRENCY),
        # Long polls as in production, shorter: the worker stops once its poll returns.
        RECEIVE_WAIT_SECONDS="5",
        COMPACTION_RETRY_SECONDS="86400",  # the compactor answers every request
        HISTORY_WINDOW_MODE=mode,
        HISTORY_CACHE_TTL=cache_ttl,
        LOG_FORMAT="json",
    )
    worker = contenders.worker(child, workdir, name=tag)
    result = PlayResult(mode, {}, 0.0, {}, {}, {}, 0.0, None, worker.log_path)

    async def resolve(body: str) -> str:
        pointer = parse_pointer(body, {})
        if pointer is None:
            return body
        result.offloaded_payloads += 1
        response = await clients.s3.get_object(Bucket=pointer[0], Key=pointer[1])
        async with response["Body"] as stream:
            data: bytes = await stream.read()
        return data.decode("utf-8")

    payloads = Drain(clients.sqs, env["MODEL_QUEUE_URL"], keep_bodies=True, resolve=resolve)
    requests = Drain(clients.sqs, env["COMPACTION_QUEUE_URL"], tasks=1, keep_bodies=True)
    sender = _Sender(clients.sqs, env["CONVERSE_QUEUE_URL"])
    table = _Table(clients.dynamodb, env["HISTORY_TABLE"])
    running = [asyncio.create_task(sender.run())]
    payloads.start()
    requests.start()
    worker.start()
    try:
        await _warm_up(sender, payloads, mode)
        before = await worker.snapshot()
        started = time.monotonic()
        queue: asyncio.Queue[ReplayedConversation] = asyncio.Queue()
        for conversation in sorted(conversations, key=lambda c: -c.turns):  # longest first
            queue.put_nowait(conversation)
        total = sum(c.turns for c in conversations)
        progress = _Progress(say, mode, total)

        async def lane() -> None:
            while not queue.empty():
                conversation = queue.get_nowait()
                result.turns[conversation.conversation_id] = await _play_conversation(
                    conversation,
                    sender=sender,
                    payloads=payloads,
                    requests=requests,
                    table=table,
                    clients=clients,
                    codec=codec,
                    limits=limits,
                    fold=fold,
                    result=result,
                    progress=progress,
                    seed=seed,
                    pauses=pauses,
                )

        await asyncio.gather(*(lane() for _ in range(lanes)))
        result.seconds = time.monotonic() - started
        await asyncio.sleep(1.0)  # the last done marks and deletes leave (they wait 200 ms)
        after = await worker.snapshot()
        diff = contenders.diff(after, before)
        result.calls, result.requests = diff["calls"], diff["requests"]
        result.failed = diff["failed"]
        result.worker_cpu_seconds = diff["cpu_seconds"]
        result.unexpected_requests = len(requests.bodies)
        result.duplicate_payloads = payloads.duplicates
    finally:
        stopped = await worker.stop()
        result.exit_code = stopped.get("exit_code")
        result.anchors = await asyncio.to_thread(anchor_events, worker.log_path)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await payloads.stop()
        await requests.stop()
    return result


async def _warm_up(sender: _Sender, payloads: Drain, mode: str) -> None:
    """One command on a conversation of its own: the worker is up and its clients warm
    before the first snapshot (its calls are not counted)."""
    warm = f"warm-up-{mode}"
    await sender.send(
        json.dumps(
            {
                "type": "converse",
                "command_id": warm,
                "conversation_id": warm,
                "message": "Warm-up question?",
            }
        )
    )
    if not await payloads.wait_for([warm], within=60):
        raise RuntimeError(f"the worker in {mode} mode did not answer the warm-up within 60 s")
    payloads.bodies.pop(warm, None)


@dataclass
class _Progress:
    say: Say
    mode: str
    total: int
    done: int = 0
    next_report: int = 0
    started: float = field(default_factory=time.monotonic)

    def turn(self) -> None:
        self.done += 1
        if self.done >= self.next_report:
            rate = self.done / max(1e-9, time.monotonic() - self.started)
            self.say(f"  {self.mode}: {self.done:,} / {self.total:,} turns ({rate:.0f}/s)")
            self.next_report += max(100, self.total // 8)


async def _play_conversation(
    conversation: ReplayedConversation,
    *,
    sender: _Sender,
    payloads: Drain,
    requests: Drain,
    table: _Table,
    clients: Any,
    codec: ViewCodec,
    limits: WindowLimits,
    fold: FoldLimits,
    result: PlayResult,
    progress: _Progress,
    seed: int,
    pauses: str | None = None,
) -> list[PlayedTurn]:
    cid = conversation.conversation_id
    track = FoldTrack(ScriptedCompactor(cid, seed))
    played: list[PlayedTurn] = []
    times = turn_times(cid, conversation.turns, pauses, seed=seed) if pauses else None
    for turn in range(1, conversation.turns + 1):
        if track.before_turn(turn):
            assert track.summary is not None
            await table.land(cid, track.folded_through, track.summary)
        command = command_id(cid, turn)
        sent = time.time()
        body: dict[str, Any] = {
            "type": "converse",
            "command_id": command,
            "conversation_id": cid,
            "message": conversation.question(turn).content,
        }
        asked = START + timedelta(seconds=int(times[turn - 1])) if times else None
        if asked is not None:
            body["sent_at"] = rfc3339(asked)
        await sender.send(json.dumps(body, ensure_ascii=False))
        if not await payloads.wait_for([command], within=TURN_TIMEOUT):
            raise RuntimeError(f"no payload for {command} within {TURN_TIMEOUT:g} s")
        text = payloads.bodies.pop(command)
        arrived_ms = payloads.arrivals[command].arrived_ms
        payload = json.loads(text)
        history = conversation.history(turn)
        through: int | None = None
        plan = track.due(history, limits, fold)
        if plan is not None:
            if not await requests.wait_for([command], within=TURN_TIMEOUT):
                raise RuntimeError(f"no fold request from {command} within {TURN_TIMEOUT:g} s")
            request = json.loads(requests.bodies.pop(command))
            through = int(request["through"])
            result.mismatched_requests += through != plan.through
            track.requested(turn, through)
        converse = payload["converse"]
        kept = payload["history"]
        played.append(
            PlayedTurn(
                turn=turn,
                folded_through=track.folded_through,
                oldest_seq=kept[0]["seq"] if kept else None,
                kept=len(kept),
                estimated_tokens=int(payload["window"]["estimated_tokens"]),
                view=codec.encode(converse["system"], converse["messages"]),
                digest=converse_digest(converse),
                request_through=through,
                sent=sent,
                arrived_ms=arrived_ms,
            )
        )
        del payload, text, converse
        exchange = conversation.exchange(turn)
        if asked is None:
            items = message_items(cid, exchange)
        else:  # the question stored (and answered) when it was sent
            items = [
                message_item(cid, m.seq, m.role, m.content, created_at=asked) for m in exchange
            ]
        await put_items(clients.dynamodb, table.name, items)
        progress.turn()
    return played


def anchor_events(log_path: Path) -> dict[str, tuple[str, bool]]:
    """The cache-aligned window's choice per command, from the worker's JSON log lines
    (event names, seqs and flags only: the log holds no content)."""
    out: dict[str, tuple[str, bool]] = {}
    with open(log_path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if '"clerk.converse_window_anchor"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            reason = event.get("reason")
            outcome = str(event.get("outcome")) + (f":{reason}" if reason else "")
            out[str(event.get("command_id"))] = (outcome, bool(event.get("write")))
    return out
