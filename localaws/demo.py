"""The demo that ``worker demo`` (``make run``) runs: the stage on an embedded moto server,
with a long demo matter conversation.

Starts moto on 127.0.0.1 (no AWS account needed), creates the resources, seeds a matter
long enough that the window drops, trims and asks for a fold, sends one converse command,
then runs the worker and prints what reaches the model and compaction queues. Content is
abbreviated on this console only; the payload on the queue is whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from worker.adapters.history_writer import message_item, state_item, write_items
from worker.app.resources import Resources, create_resources
from worker.cli.demo_console import show, show_prompt
from worker.logs import configure_logging
from worker.settings import load_settings

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import AttributeValueTypeDef
    from types_aiobotocore_sqs import SQSClient

CONVERSATION_ID = "matter-1187"
FOLDED_THROUGH = 34
SUMMARY = (
    "Counsel acts for Northwind (buyer) under a 2024 master supply agreement with Contoso. "
    "Agreed so far: the governing law is English law; notices go to the registered office."
)
GREETING = "Hello, I am Mira. Ask me anything about this matter."
QUESTIONS = [
    "Summarise the supplier's delivery obligations under clause {n}.",
    "Does clause {n} allow the buyer to withhold payment for late delivery?",
    "How does the limitation of liability in clause {n} interact with the indemnity?",
    "Draft a short note to the client on the risk in clause {n}.",
]
ANSWER = (
    "Under clause {n} the supplier must deliver in accordance with the agreed schedule; "
    "time is of the essence only where the order says so. The buyer's remedies are a "
    "service credit and, after a cure period of 30 days, termination for material breach. "
    "Nothing in clause {n} excludes the general right to damages, but the cap in clause 18 "
    "applies. I would flag the interaction with the force majeure carve-out to the client."
)
#: The newest turns, where the window is: the shapes a stored history really takes.
RECENT: list[tuple[str, str]] = [
    ("user", "Here is the agreement; what does clause 14.2 say?\n{contract}"),
    ("assistant", "Clause 14.2 lets either party terminate on 90 days' written notice."),
    ("user", "Is the notice period in clause 14.2 shortened for insolvency?"),
    # The first try failed before an answer was stored; counsel asked again.
    ("user", "Is the notice period in clause 14.2 shortened for insolvency? (asked again)"),
    # A long answer stored in two parts.
    ("assistant", "Yes: on an insolvency event the notice period falls to 10 days (part 1/2)."),
    ("assistant", "The insolvency events are listed in clause 1.1 (part 2/2)."),
    ("user", "Which notices have we already served?"),
    # A failed generation stored as an empty answer.
    ("assistant", ""),
    ("user", "Which notices have we served under clause 14.2?"),
    ("assistant", "None yet: the only notice on file is the delay notice under clause 9."),
]
#: A second, short matter whose window reaches its first message: a stored greeting.
INTAKE_ID = "matter-2040"
INTAKE: list[tuple[str, str]] = [
    ("assistant", GREETING),
    ("user", "We act for the landlord. Can the tenant assign the lease without consent?"),
    ("assistant", "No: clause 7.3 requires the landlord's prior written consent."),
]
COMMANDS = [
    (CONVERSATION_ID, "Given all that, can the buyer terminate under clause 14.2 now?"),
    (INTAKE_ID, "Draft the landlord's reply refusing consent."),
]


def _contract() -> str:
    clauses = (
        f"{n}. The Supplier shall perform its obligations under this clause {n} with "
        "reasonable skill and care, in accordance with Good Industry Practice, and shall "
        "notify the Buyer in writing of any anticipated delay without undue delay.\n"
        for n in range(1, 160)
    )
    return "MASTER SUPPLY AGREEMENT (extract pasted by counsel)\n" + "".join(clauses)


def demo_history(length: int = 57) -> Iterator[tuple[int, str, str]]:
    """(seq, role, content) oldest first: a greeting, question/answer pairs, then the
    recent turns (a pasted contract, a retried question, a two-part and an empty answer)."""
    yield 1, "assistant", GREETING
    older = length - 1 - len(RECENT)
    for i in range(older):
        n = i // 2 + 3
        if i % 2 == 0:
            yield i + 2, "user", QUESTIONS[(i // 2) % len(QUESTIONS)].format(n=n)
        else:
            yield i + 2, "assistant", ANSWER.format(n=n)
    for seq, (role, text) in enumerate(RECENT, start=older + 2):
        yield seq, role, text.format(contract=_contract()) if "{contract}" in text else text


def _items(
    conversation_id: str, messages: Iterable[tuple[int, str, str]]
) -> list[dict[str, AttributeValueTypeDef]]:
    return [message_item(conversation_id, seq, role, content) for seq, role, content in messages]


async def seed(dynamodb: DynamoDBClient, table: str) -> None:
    items = _items(CONVERSATION_ID, demo_history())
    items.append(state_item(CONVERSATION_ID, folded_through=FOLDED_THROUGH, summary=SUMMARY))
    items += _items(INTAKE_ID, ((seq, r, c) for seq, (r, c) in enumerate(INTAKE, start=1)))
    await write_items(dynamodb, table, items)


async def tap(sqs: SQSClient, queue_url: str, title: str, seen: asyncio.Queue[str]) -> None:
    """Print what arrives on an output queue (a stand-in for the next stage)."""
    while True:
        response = await sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)
        for message in response.get("Messages", []):
            body = json.loads(message["Body"])
            shown = show_prompt(body) if body.get("type") == "prompt" else show(body)
            print(f"\n──── {title} ────\n{shown}\n", flush=True)
            await sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            seen.put_nowait(title)


def _environment(endpoint: str) -> None:
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "LOG_FORMAT": "console",
        "RECEIVE_WAIT_SECONDS": "2",
    }.items():
        os.environ.setdefault(name, value)


def run_demo(*, once: bool = False) -> int:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:  # pragma: no cover - the dev extra installs it
        print("worker demo needs moto: run `make install` first")
        return 1
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        _environment(endpoint)
        print(f"moto server on {endpoint} (AWS_ENDPOINT_URL)")
        return asyncio.run(_demo(once=once))
    finally:
        server.stop()


async def _demo(*, once: bool) -> int:
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
        for number, (conversation_id, text) in enumerate(COMMANDS, start=1):
            command = {
                "type": "converse",
                "command_id": f"c-demo-{number}",
                "conversation_id": conversation_id,
                "message": text,
                "sent_at": "2026-11-30T09:00:00Z",
            }
            await clients.sqs.send_message(
                QueueUrl=settings.converse_queue_url, MessageBody=json.dumps(command)
            )
            print(f"sent converse command c-demo-{number} on {conversation_id}")
        print("the worker runs until Ctrl-C; send it more commands from another terminal with")
        print(
            f"  AWS_ENDPOINT_URL={os.environ['AWS_ENDPOINT_URL']} AWS_ACCESS_KEY_ID=testing "
            "AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1 "
            f"CONVERSE_QUEUE_URL={settings.converse_queue_url} "
            f".venv/bin/worker send --conversation {CONVERSATION_ID} < question.txt"
        )
        print(
            "(the message is read from stdin, so it stays out of shell history and ps; without "
            "'< question.txt', type it and end it with Ctrl-D)\n"
        )

        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        seen: asyncio.Queue[str] = asyncio.Queue()
        taps = [
            asyncio.create_task(tap(clients.sqs, env["MODEL_QUEUE_URL"], "prompt payload", seen)),
            asyncio.create_task(
                tap(clients.sqs, env["COMPACTION_QUEUE_URL"], "compaction request", seen)
            ),
        ]
        if once:
            expected = ["prompt payload"] * len(COMMANDS) + ["compaction request"]
            taps.append(asyncio.create_task(_stop_after(stopping, seen, expected)))
        try:
            await run_worker(settings, stopping)
        finally:
            for task in taps:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return 0


async def _stop_after(stopping: asyncio.Event, seen: asyncio.Queue[str], titles: list[str]) -> None:
    """Stop once every expected output has been shown (``--once``)."""
    waiting = sorted(titles)
    while waiting:
        waiting.remove(await seen.get())
    stopping.set()
