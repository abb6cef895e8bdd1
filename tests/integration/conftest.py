"""A moto server on 127.0.0.1 for the whole session, reset and bootstrapped for each test.

The worker under test is the real one (aioboto3 over HTTP), either in-process
(:func:`running_worker`) or as a ``worker run`` subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.trace import TracerProvider

from localaws.endpoints import CREDENTIALS, REGION, aws_environ
from localaws.history_writer import message_item, state_item, write_items
from localaws.moto import reset_moto, threaded_moto
from tests.converse_rules import assert_model_ready
from worker.adapters.dynamodb import STATE_KEY
from worker.app.resources import Resources, create_resources, dead_letter_name
from worker.app.runtime import Clients, aws_clients, run_worker
from worker.delivery.pointers import parse_pointer
from worker.settings import Settings


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """One moto server for the session, patched where moto differs from the services in a
    way the tests depend on (``localaws.moto``: atomic conditional writes, batch entries
    keeping their trace header); the patches are undone at the end."""
    with pytest.MonkeyPatch.context() as patch, threaded_moto(patch.setattr) as endpoint:
        yield endpoint


@dataclass
class Stack:
    """The bootstrapped resources and clients for one test."""

    endpoint: str
    env: dict[str, str]
    clients: Clients
    resources: Resources = field(default_factory=Resources)
    #: Prompt payloads whose ``converse`` view :meth:`drain` has checked.
    prompts_checked: int = 0

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {name.lower(): value for name, value in self.env.items()}
        # No health file unless a test asks: tests run workers side by side.
        values.update(receive_wait_seconds=1, shutdown_grace_seconds=5.0, health_file="")
        values.update(overrides)
        return Settings(**values)

    def process_env(self, **extra: str) -> dict[str, str]:
        """Environment for a ``worker run`` subprocess pointed at this stack."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(aws_environ(self.endpoint), RECEIVE_WAIT_SECONDS="1", HEALTH_FILE="")
        env.update(self.env)
        env.update(extra)
        return env

    async def worker_process(self, *args: str, **env: str) -> asyncio.subprocess.Process:
        """``worker <args>`` started as a process pointed at this stack (``env`` added to
        its environment), its stdout and stderr piped."""
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "worker.cli",
            *args,
            env=self.process_env(**env),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

    async def cli_output(self, *args: str, **env: str) -> str:
        """What ``worker <args>`` (:meth:`worker_process`) printed; it must exit 0 within a
        minute."""
        process = await self.worker_process(*args, **env)
        async with asyncio.timeout(60):
            stdout, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()
        return stdout.decode()

    async def send_command(self, **fields: Any) -> None:
        command = {"type": "converse", "message": "What does clause 14.2 say?", **fields}
        await self.send_raw(json.dumps(command))

    async def send_raw(self, body: str) -> None:
        await self.clients.sqs.send_message(
            QueueUrl=self.env["CONVERSE_QUEUE_URL"], MessageBody=body
        )

    async def seed(
        self,
        conversation_id: str,
        messages: list[tuple[str, str]],
        *,
        folded_through: int | None = None,
        summary: str | None = None,
        first_seq: int = 1,
    ) -> None:
        """Write (role, content) messages from ``first_seq`` on, and the state item if given."""
        items = [
            message_item(conversation_id, seq, role, content)
            for seq, (role, content) in enumerate(messages, start=first_seq)
        ]
        if folded_through is not None or summary is not None:
            items.append(
                state_item(conversation_id, folded_through=folded_through, summary=summary)
            )
        await self.put_items(items)

    async def put_items(self, items: list[dict[str, Any]]) -> None:
        """The history items, through the one writer the demo and the benchmark use too."""
        await write_items(self.clients.dynamodb, self.env["HISTORY_TABLE"], items, parallel=8)

    async def drain(
        self, env_name: str, *, expect: int | None = None, within: float = 60.0
    ) -> list[dict[str, Any]]:
        """Receive and delete everything on a queue; with ``expect``, wait until that many came.

        Without ``expect`` it stops at the first empty receive: it takes what the queue holds
        now, so call it once whatever it should find was sent (e.g. after
        :meth:`until_empty` on the queue that feeds it). ``within`` only bounds a wait that
        fails: a count that comes returns at once, so it is wide (a slow machine must not
        fail a test that a fast one passes).

        Every prompt payload drained from the model queue is checked on the way: its
        ``converse`` view must be one Bedrock's Converse API accepts (``assert_model_ready``).
        """
        url = self.env.get(env_name, env_name)
        received: list[dict[str, Any]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while loop.time() < deadline:
            response = await self.clients.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=1,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["AWSTraceHeader", "SentTimestamp"],
            )
            messages = response.get("Messages", [])
            for message in messages:
                received.append(message)
                if url == self.env.get("MODEL_QUEUE_URL"):
                    message["ResolvedPayload"] = await self.check_prompt(message)
                await self.clients.sqs.delete_message(
                    QueueUrl=url, ReceiptHandle=message["ReceiptHandle"]
                )
            if expect is None and not messages:
                break
            if expect is not None and len(received) >= expect:
                break
        return received

    async def check_prompt(self, message: dict[str, Any]) -> Any:
        """A prompt payload (inline or behind an S3 pointer) is ready for Converse as is;
        returns the payload, read from S3 if the body is a pointer."""
        body = message["Body"]
        attributes = {
            name: value.get("StringValue", "")
            for name, value in message.get("MessageAttributes", {}).items()
        }
        pointer = parse_pointer(body, attributes)
        if pointer is not None:
            bucket, key = pointer
            stored = await self.clients.s3.get_object(Bucket=bucket, Key=key)
            async with stored["Body"] as stream:
                body = (await stream.read()).decode("utf-8")
        payload = json.loads(body)
        if payload.get("type") == "prompt":
            assert_model_ready(payload)
            self.prompts_checked += 1
        return payload

    async def state_item(self, conversation_id: str) -> dict[str, Any]:
        """The conversation's ``state`` item as stored (a consistent read), or {}."""
        response = await self.clients.dynamodb.get_item(
            TableName=self.env["HISTORY_TABLE"],
            Key={"pk": {"S": conversation_id}, "sk": {"S": STATE_KEY}},
            ConsistentRead=True,
        )
        return dict(response.get("Item", {}))

    async def depth(self, env_name: str) -> int:
        """Messages on a queue (an env name or a URL), visible or in flight."""
        response = await self.clients.sqs.get_queue_attributes(
            QueueUrl=self.env.get(env_name, env_name),
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )
        return sum(int(value) for value in response["Attributes"].values())

    async def until_empty(self, env_name: str, *, within: float = 120.0) -> None:
        """Wait until a queue holds no message, visible or in flight. On the converse queue:
        every command was settled (a turn deletes its command only after its prompt, its
        fold request and its dead letter went out), so what they sent is all there."""
        async with asyncio.timeout(within):
            while await self.depth(env_name):
                await asyncio.sleep(0.05)

    async def dead_letter_url(self, env_name: str = "CONVERSE_QUEUE_URL") -> str:
        [spec] = [q for q in self.resources.queues if q.env == env_name]
        name = dead_letter_name(spec.name)
        return (await self.clients.sqs.get_queue_url(QueueName=name))["QueueUrl"]

    async def with_resources(self, resources: Resources) -> Stack:
        """Another set of the contract's resources on the same server (other names)."""
        env = await create_resources(
            self.clients.sqs, self.clients.dynamodb, self.clients.s3, resources, region=REGION
        )
        return Stack(endpoint=self.endpoint, env=env, clients=self.clients, resources=resources)


@pytest.fixture
def fresh_moto(moto_endpoint: str) -> str:
    """The session's moto server with every resource of earlier tests gone."""
    reset_moto(moto_endpoint)
    return moto_endpoint


@pytest.fixture
async def stack(fresh_moto: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Stack]:
    moto_endpoint = fresh_moto
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    async with aws_clients() as clients:
        env = await create_resources(
            clients.sqs, clients.dynamodb, clients.s3, Resources(), region=REGION
        )
        yield Stack(endpoint=moto_endpoint, env=env, clients=clients)


class Polls:
    """Long polls (SQS ReceiveMessage) counted as they reach the server: a stop that comes
    after :meth:`reached` finds a poll parked there, whatever the machine's speed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def saw_one(self) -> None:
        with self._lock:  # moto's server answers on its own threads
            self._count += 1

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    async def reached(self, count: int, *, within: float = 60.0) -> None:
        async with asyncio.timeout(within):
            while self.count < count:
                await asyncio.sleep(0.02)


@pytest.fixture
def sent_polls(monkeypatch: pytest.MonkeyPatch) -> Polls:
    """ReceiveMessage requests of this process whose bytes were all written to the server's
    socket (any server: moto or LocalStack), counted from aiohttp's body writer."""
    from aiohttp.client_reqrep import ClientRequest

    polls = Polls()
    unpatched = ClientRequest.write_bytes

    async def write_bytes(self: ClientRequest, *args: Any, **kwargs: Any) -> None:
        await unpatched(self, *args, **kwargs)
        if self.headers.get("X-Amz-Target") == "AmazonSQS.ReceiveMessage":
            polls.saw_one()

    monkeypatch.setattr(ClientRequest, "write_bytes", write_bytes)
    return polls


class PollsByQueue:
    """:class:`Polls` per queue name, shared with the server's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._polls: dict[str, Polls] = {}

    def of(self, queue_name: str) -> Polls:
        with self._lock:
            return self._polls.setdefault(queue_name, Polls())


@pytest.fixture
def moto_polls(monkeypatch: pytest.MonkeyPatch) -> PollsByQueue:
    """ReceiveMessage calls that reached the moto server, by queue name (from any process:
    the server runs in this one)."""
    from moto.sqs.models import SQSBackend

    polls = PollsByQueue()
    unpatched = SQSBackend.receive_message

    def receive_message(self: SQSBackend, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        polls.of(queue_name).saw_one()
        return unpatched(self, queue_name, *args, **kwargs)

    monkeypatch.setattr(SQSBackend, "receive_message", receive_message)
    return polls


@contextlib.asynccontextmanager
async def running_worker(
    settings: Settings, *, tracer_provider: TracerProvider | None = None
) -> AsyncIterator[asyncio.Event]:
    """The real worker in this event loop; leaving the block stops it and waits for the drain."""
    stopping = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, stopping, tracer_provider=tracer_provider))
    try:
        yield stopping
    finally:
        stopping.set()
        await asyncio.wait_for(task, timeout=30)


def exchanges(count: int, *, chars: int = 40) -> list[tuple[str, str]]:
    """``count`` question/answer pairs whose contents are numbered and ``chars`` long."""
    pairs = []
    for i in range(count):
        pairs.append(("user", f"q{i} ".ljust(chars, "q")))
        pairs.append(("assistant", f"a{i} ".ljust(chars, "a")))
    return pairs


def body_of(message: dict[str, Any]) -> Any:
    return json.loads(message["Body"])


_REPORT: dict[str, Any] = {}


@pytest.fixture
def reliability_report() -> dict[str, Any]:
    """Figures a test measured, printed at the end of the run with --reliability-figures
    (``make bench``): timing belongs in benchmarks, not in the test run."""
    return _REPORT


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _REPORT and config.getoption("--reliability-figures"):
        terminalreporter.section("reliability figures")
        for label, figures in _REPORT.items():
            terminalreporter.line(f"{label}: {json.dumps(figures)}")
