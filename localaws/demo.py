"""``make run`` (``python -m localaws.demo``): the converse stage on an embedded moto server,
with the stages around it played here, and the model's bill at the end.

Starts moto on 127.0.0.1 (no AWS account needed), creates the resources, seeds the demo
matters (:mod:`localaws.demo_matter`), sends one converse command on each, and runs the real
worker in the cache-aligned mode (unless ``HISTORY_WINDOW_MODE`` says otherwise). It prints
what reaches the model and compaction queues. The model stage is the prompt-cache stand-in
(:class:`localaws.model_stage.ModelStage`, its own system prompt first): it answers the long
matter's prompts at the demo's moments, and the answer is stored as the writer stores it,
with its bill (``model_usage``), after the question it answers. Counsel then asks a few more
questions, minutes apart; each is answered the same way. Last, the worker stops and the demo
prints ``worker bill`` for the long matter (:func:`worker.cli.bill_report.read_bill`).

``--once`` stops after the first prompts and the fold request; ``--serve`` keeps the worker
(and the model stage) running after the bill, until Ctrl-C, for commands sent with
``worker send``. Content is abbreviated on this console only; the payload on the queue is
whole. Here, not in the worker package: it plays other stages, from ``localaws``, which the
worker never imports.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from localaws.demo_console import show, show_answer, show_prompt, show_turn
from localaws.demo_matter import (
    ANSWER_DELAY,
    COMMANDS,
    CONVERSATION_ID,
    FIRST_ANSWER,
    FOLDED_THROUGH,
    FOLLOW_UPS,
    INTAKE,
    INTAKE_ID,
    START,
    demo_history,
    seed,
)
from localaws.endpoints import CREDENTIALS
from localaws.history_writer import message_item, write_items
from localaws.model_stage import ANSWER, ModelStage, answer_item, put_answer_async
from localaws.moto import threaded_moto
from worker.adapters.dynamodb import rfc3339
from worker.app.resources import Resources, create_resources
from worker.logs import configure_logging
from worker.settings import Settings, load_settings

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_sqs import SQSClient

PROMPTS, FOLDS = "prompt payload", "compaction request"


@dataclass
class ModelAndWriter:
    """The model stage and the writer of the long matter: answers each of its prompts with the
    stand-in at the command's moment plus :data:`ANSWER_DELAY`, then stores the question and
    the answer (with ``model_usage``) after the newest message."""

    dynamodb: DynamoDBClient
    table: str
    newest_seq: int
    #: Each command of the long matter: its message, ``sent_at`` and the answer to give.
    commands: dict[str, tuple[str, datetime, str]] = field(default_factory=dict)
    model: ModelStage = field(default_factory=ModelStage)
    last_moment: datetime = START
    answered: asyncio.Queue[str] = field(default_factory=asyncio.Queue)

    async def answer(self, payload: dict[str, Any]) -> str | None:
        if payload["conversation_id"] != CONVERSATION_ID:
            return None
        # A command the demo did not send (``worker send``, with --serve) is answered now.
        now = max(datetime.now(UTC), self.last_moment + timedelta(minutes=1))
        question, sent_at, content = self.commands.get(
            payload["command_id"], (payload["message"], now, ANSWER)
        )
        self.last_moment = sent_at
        answer = self.model.answer(payload, at=sent_at + ANSWER_DELAY, content=content)
        asked = message_item(CONVERSATION_ID, self.newest_seq + 1, "user", question, sent_at)
        await write_items(self.dynamodb, self.table, [asked])
        item = answer_item(payload, answer, seq=self.newest_seq + 2)
        await put_answer_async(self.dynamodb, self.table, item)
        self.newest_seq += 2
        self.answered.put_nowait(payload["command_id"])
        return show_answer(answer.usage, answered_at=answer.answered_at, seq=self.newest_seq)


async def tap(
    sqs: SQSClient, queue_url: str, title: str, seen: asyncio.Queue[str], writer: ModelAndWriter
) -> None:
    """Print what arrives on an output queue (a stand-in for the next stage); a prompt of the
    long matter is answered and stored. The first prompt of a conversation is shown whole,
    later ones in one line."""
    shown: set[str] = set()
    while True:
        response = await sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)
        for message in response.get("Messages", []):
            body = json.loads(message["Body"])
            if body.get("type") != "prompt":
                print(f"\n──── {title} ────\n{show(body)}\n", flush=True)
            elif body["conversation_id"] in shown:
                print(f"\n──── {title}: {show_turn(body)}", flush=True)
            else:
                shown.add(body["conversation_id"])
                print(f"\n──── {title} ────\n{show_prompt(body)}\n", flush=True)
            if body.get("type") == "prompt" and (answered := await writer.answer(body)):
                print(f"──── model stage (stand-in): {answered}\n", flush=True)
            await sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            seen.put_nowait(title)


def _environment(endpoint: str) -> None:
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    for name, value in {
        **CREDENTIALS,
        "LOG_FORMAT": "console",
        "RECEIVE_WAIT_SECONDS": "2",
        # The mode whose cache reads the bill shows; HISTORY_WINDOW_MODE=sliding shows the other.
        "HISTORY_WINDOW_MODE": "cache-aligned",
        # The model the stand-in's cache plays (1,024 tokens, 1h): the mode needs to know it.
        "MODEL_ID": STAND_IN_MODEL_ID,
    }.items():
        os.environ.setdefault(name, value)


def run_demo(*, once: bool = False, serve: bool = False) -> int:
    try:
        import moto  # noqa: F401  (the dev extra installs it; threaded_moto imports it late)
    except ImportError:  # pragma: no cover
        print("the demo needs moto: run `make install` first")
        return 1
    with threaded_moto() as endpoint:
        _environment(endpoint)
        print(f"moto server on {endpoint} (AWS_ENDPOINT_URL)")
        return asyncio.run(_demo(once=once, serve=serve))


async def _demo(*, once: bool, serve: bool) -> int:
    from worker.app.runtime import aws_clients, run_worker

    async with aws_clients() as clients:
        env = await create_resources(
            clients.sqs, clients.dynamodb, clients.s3, Resources(), region="us-east-1"
        )
        os.environ.update(env)
        settings = load_settings()
        configure_logging(settings.log_format)
        await seed(clients.dynamodb, settings.history_table)
        count = sum(1 for _ in demo_history())
        print(f"seeded {CONVERSATION_ID}: {count} messages, folded through {FOLDED_THROUGH}")
        print(f"seeded {INTAKE_ID}: {len(INTAKE)} messages, the first a stored greeting")
        print(f"window mode: {settings.history_window_mode}")
        writer = ModelAndWriter(clients.dynamodb, settings.history_table, newest_seq=count)
        send = _Sender(clients.sqs, settings.converse_queue_url, writer)
        for number, (conversation_id, text) in enumerate(COMMANDS, start=1):
            await send(f"c-demo-{number}", conversation_id, text, START, FIRST_ANSWER)

        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        seen: asyncio.Queue[str] = asyncio.Queue()
        taps = [
            asyncio.create_task(tap(clients.sqs, env["MODEL_QUEUE_URL"], PROMPTS, seen, writer)),
            asyncio.create_task(tap(clients.sqs, env["COMPACTION_QUEUE_URL"], FOLDS, seen, writer)),
        ]
        script = asyncio.create_task(
            _script(settings, send, writer, seen, stopping, once=once, serve=serve)
        )
        for task in [*taps, script]:  # a part that fails stops the demo; its error is raised
            task.add_done_callback(partial(_stop_on_error, stopping))
        try:
            await run_worker(settings, stopping)
        finally:
            for task in [*taps, script]:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return 0


def _stop_on_error(stopping: asyncio.Event, task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        stopping.set()


@dataclass
class _Sender:
    """Sends a converse command stamped with its ``sent_at``; a command on the long matter is
    registered with the writer, which answers it."""

    sqs: SQSClient
    queue_url: str
    writer: ModelAndWriter

    async def __call__(
        self, command_id: str, conversation_id: str, text: str, sent_at: datetime, answer: str
    ) -> None:
        if conversation_id == CONVERSATION_ID:
            self.writer.commands[command_id] = (text, sent_at, answer)
        command = {
            "type": "converse",
            "command_id": command_id,
            "conversation_id": conversation_id,
            "message": text,
            "sent_at": rfc3339(sent_at),
        }
        await self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(command))
        print(
            f"sent converse command {command_id} on {conversation_id} (sent_at {rfc3339(sent_at)})"
        )


async def _script(
    settings: Settings,
    send: _Sender,
    writer: ModelAndWriter,
    seen: asyncio.Queue[str],
    stopping: asyncio.Event,
    *,
    once: bool,
    serve: bool,
) -> None:
    """The demo's turns: wait for the first outputs (both prompts, the fold request and the
    first answer), then each follow-up question once the one before is answered; then the
    bill. Stops the worker at the end unless ``serve``."""
    await _wait_for(seen, [PROMPTS] * len(COMMANDS) + [FOLDS])
    await writer.answered.get()
    if once:
        stopping.set()
        return
    for number, follow_up in enumerate(FOLLOW_UPS, start=len(COMMANDS) + 1):
        await send(
            f"c-demo-{number}",
            CONVERSATION_ID,
            follow_up.question,
            follow_up.sent_at,
            follow_up.answer,
        )
        await writer.answered.get()
    await _print_bill(settings, writer.dynamodb)
    if serve:
        _print_hints(settings)
        return
    stopping.set()


async def _wait_for(seen: asyncio.Queue[str], titles: list[str]) -> None:
    waiting = sorted(titles)
    while waiting:
        title = await seen.get()
        if title in waiting:
            waiting.remove(title)


async def _print_bill(settings: Settings, dynamodb: DynamoDBClient) -> None:
    from worker.adapters.dynamodb import DynamoHistoryStore
    from worker.cli.bill_report import bill_lines, read_bill

    store = DynamoHistoryStore(dynamodb, settings.history_table)
    bill = await read_bill(store, CONVERSATION_ID, settings.plan_config)
    print(f"\n──── worker bill --conversation {CONVERSATION_ID} ────")
    print("\n".join(bill_lines(bill)) + "\n", flush=True)


def _print_hints(settings: Settings) -> None:
    environment = (
        f"AWS_ENDPOINT_URL={os.environ['AWS_ENDPOINT_URL']} AWS_ACCESS_KEY_ID=testing "
        "AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1"
    )
    print("the worker runs until Ctrl-C; send it more commands from another terminal with")
    print(
        f"  {environment} CONVERSE_QUEUE_URL={settings.converse_queue_url} "
        f".venv/bin/worker send --conversation {CONVERSATION_ID} < question.txt"
    )
    print(
        "(the message is read from stdin, so it stays out of shell history and ps; without "
        "'< question.txt', type it and end it with Ctrl-D)\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localaws.demo",
        description="The converse stage on a local moto server, with a demo matter, the model "
        "stage's stand-in answering it, and the bill.",
    )
    parser.add_argument(
        "--once", action="store_true", help="stop after the first prompts and fold request"
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="after the bill, keep the worker running until Ctrl-C (for `worker send`)",
    )
    args = parser.parse_args(argv)
    return run_demo(once=args.once, serve=args.serve)


if __name__ == "__main__":
    sys.exit(main())
