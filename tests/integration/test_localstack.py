"""The worker against a second, independent SQS and S3: LocalStack's, run on the host.

`make localstack-host` installs localstack-core 4.7.0 into .localstack/venv; `make test`
(and so CI) does it first. Without it, a `pytest` run by hand skips these tests and says
why, and under CI=true they fail: CI never passes with them skipped. Its DynamoDB would need a
download at start-up, so the history table stays on moto (AWS_ENDPOINT_URL_DYNAMODB).
Everything listens on 127.0.0.1: LocalStack only honours GATEWAY_LISTEN with hypercorn.

The checks where two SQS implementations may differ run over both, moto and LocalStack
(``two_sqs``): a stop while idle on a long poll, the dead-letter path and a redrive by
SQS's own move task, ``AWSTraceHeader`` on batched sends, refused entries of batch calls.
What they found differs is pinned per implementation, and the worker must hold on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import NamedTuple, NoReturn

import pytest

from localaws.endpoints import CREDENTIALS, free_port
from tests.conftest import captured_logs
from tests.integration.conftest import (
    Polls,
    Stack,
    body_of,
    exchanges,
    running_worker,
)
from tests.integration.test_dlq import depth, run_cli
from worker.adapters.sqs import OutboundMessage, SqsQueue
from worker.app.resources import Resources, create_resources
from worker.app.runtime import aws_clients
from worker.cli import dlq_operations as dlq
from worker.delivery.pointers import SIZE_ATTRIBUTE, pointer_body
from worker.errors import StoreUnavailable
from worker.ports import DeleteFailure, ReceivedMessage

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOCALSTACK_PYTHON = ROOT / ".localstack" / "venv" / "bin" / "python"


def localstack_is_missing() -> NoReturn:
    """Under CI=true a test that needs LocalStack fails (CI never passes with it skipped);
    a `pytest` run by hand skips it and says why (`make test` installs it first)."""
    missing = "LocalStack on the host is not installed: run `make localstack-host`"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{missing} (CI=true: the LocalStack tests must run)")
    pytest.skip(missing)


@pytest.fixture(scope="module")
def localstack_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not LOCALSTACK_PYTHON.exists():
        localstack_is_missing()
    port = free_port()
    root = tmp_path_factory.mktemp("localstack")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "OVERRIDE_IN_DOCKER": "0",
        "GATEWAY_SERVER": "hypercorn",  # the only server that binds just GATEWAY_LISTEN
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "LOCALSTACK_HOST": f"127.0.0.1:{port}",
        "SERVICES": "sqs,s3",
        "DISABLE_EVENTS": "1",
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        "DNS_ADDRESS": "0",
        "SQS_ENDPOINT_STRATEGY": "path",
        "FILESYSTEM_ROOT": str(root / "fs"),
        "CONFIG_DIR": str(root / "config"),
    }
    log = (root / "localstack.log").open("w")
    process = subprocess.Popen(
        [str(LOCALSTACK_PYTHON), "-m", "localstack.runtime.main"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = (
            time.monotonic() + 120
        )  # up in ~2 s; a loaded machine may take several times that
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/_localstack/health", timeout=2) as r:
                    services = json.load(r)["services"]
                if all(services.get(s) in ("available", "running") for s in ("sqs", "s3")):
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"LocalStack did not come up; see {log.name}")
            time.sleep(0.3)
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


async def test_the_worker_serves_through_localstacks_sqs_and_s3(
    localstack_endpoint: str, fresh_moto: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", localstack_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", fresh_moto)
    async with aws_clients() as clients:
        resources = Resources(prefix="ls")
        env = await create_resources(
            clients.sqs, clients.dynamodb, clients.s3, resources, region="us-east-1"
        )
        assert env["CONVERSE_QUEUE_URL"].startswith(localstack_endpoint)
        stack = Stack(endpoint=localstack_endpoint, env=env, clients=clients, resources=resources)
        await stack.seed("matter-ls", exchanges(20), folded_through=0)
        pasted = "Clause 14.2: either party may terminate on notice. " * 12_000  # ~600 KB
        # Over SQS's 256 KiB in LocalStack 4.7: sent as the Extended Client sends it.
        command = json.dumps(
            {"type": "converse", "command_id": "c-ls", "conversation_id": "matter-ls",
             "message": pasted}
        )  # fmt: skip
        await clients.s3.put_object(
            Bucket=env["PAYLOAD_BUCKET"], Key="inbound/c-ls.json", Body=command.encode()
        )
        await clients.sqs.send_message(
            QueueUrl=env["CONVERSE_QUEUE_URL"],
            MessageBody=pointer_body(env["PAYLOAD_BUCKET"], "inbound/c-ls.json"),
            MessageAttributes={
                SIZE_ATTRIBUTE: {"DataType": "Number", "StringValue": str(len(command))}
            },
        )
        await stack.send_raw("[1, 2")
        async with running_worker(stack.settings()):
            [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1, within=30)
            [fold] = await stack.drain("COMPACTION_QUEUE_URL", expect=1, within=30)
            [dead] = await stack.drain(await stack.dead_letter_url(), expect=1, within=30)

        assert SIZE_ATTRIBUTE in prompt["MessageAttributes"]
        pointer = json.loads(prompt["Body"])[1]
        response = await clients.s3.get_object(Bucket=pointer["s3BucketName"], Key=pointer["s3Key"])
        async with response["Body"] as stream:
            payload = json.loads(await stream.read())
    assert payload["message"] == pasted
    assert payload["window"]["kept"] == 24
    assert body_of(fold)["through"] == 40
    assert dead["Body"] == "[1, 2"


# -- where two SQS implementations may differ: moto and LocalStack side by side ---------------

INBOUND = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
_PREFIXES = itertools.count()


class Sqs(NamedTuple):
    name: str  # "moto" or "localstack"
    stack: Stack


@contextlib.asynccontextmanager
async def stack_on(
    endpoint: str, fresh_moto: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    """SQS and S3 on ``endpoint``, DynamoDB on moto; fresh queue names each time
    (LocalStack keeps its state for the module)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", fresh_moto)
    async with aws_clients() as clients:
        resources = Resources(prefix=f"two{next(_PREFIXES)}")
        env = await create_resources(
            clients.sqs, clients.dynamodb, clients.s3, resources, region="us-east-1"
        )
        yield Stack(endpoint, env, clients, resources)


@pytest.fixture(params=["moto", "localstack"])
async def two_sqs(
    request: pytest.FixtureRequest, fresh_moto: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Sqs]:
    """SQS and S3 on moto or on LocalStack, DynamoDB on moto."""
    endpoint = (
        fresh_moto if request.param == "moto" else request.getfixturevalue("localstack_endpoint")
    )
    async with stack_on(endpoint, fresh_moto, monkeypatch) as stack:
        yield Sqs(request.param, stack)


@pytest.fixture
async def localstack_stack(
    localstack_endpoint: str, fresh_moto: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    """SQS and S3 on LocalStack alone: for what moto does not have (message move tasks)."""
    async with stack_on(localstack_endpoint, fresh_moto, monkeypatch) as stack:
        yield stack


async def test_a_worker_stopped_while_idle_on_its_long_poll_hides_no_command(
    two_sqs: Sqs, sent_polls: Polls
) -> None:
    """Both implementations park a long poll cancelled on the client and give it the next
    message sent (measured: hidden for the visibility timeout, 60 s here). GIVEN a worker
    stopped once its 4 s poll has reached the server, WHEN a command is sent once it has
    exited, THEN the next worker serves it on its first receive, well within a third of
    the visibility timeout it would otherwise sit out."""
    stack = two_sqs.stack
    await stack.seed("matter-idle", exchanges(2))
    async with running_worker(stack.settings(receive_wait_seconds=4)):
        await sent_polls.reached(1)  # its long poll is on the server: stop now
    await stack.send_command(command_id="c-after-stop", conversation_id="matter-idle")
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            [prompt] = await stack.drain(
                "MODEL_QUEUE_URL", expect=1, within=stack.resources.converse_visibility_timeout / 3
            )
    assert body_of(prompt)["command_id"] == "c-after-stop"
    forwarded = [e for e in logs if e["event"] == "clerk.converse_prompt_forwarded"]
    assert [e["receive_count"] for e in forwarded] == [1]


async def test_rejections_reach_the_dead_letter_queue_with_their_reason_and_redrive_whole(
    two_sqs: Sqs,
) -> None:
    """The worker dead-letters two invalid bodies with their RejectionReason; `worker dlq
    redrive --include-rejected` sends both back as they were: with SQS's own
    StartMessageMoveTask on LocalStack (moto has none: the tool's receive-send-delete)."""
    stack = two_sqs.stack
    bodies = ["{not json", '{"type": "converse"}']
    for body in bodies:
        await stack.send_raw(body)
    url = await stack.dead_letter_url()
    async with running_worker(stack.settings()):
        while await depth(stack, url) < len(bodies):
            await asyncio.sleep(0.1)
    inspection = await dlq.inspect(SqsQueue(stack.clients.sqs, url), retention_seconds=1_209_600)
    assert inspection.by_reason == {
        "body is not valid JSON (Expecting property name enclosed in double quotes at "
        "position 1)": 1,
        "invalid command: command_id: Field required; conversation_id: Field required; "
        "message: Field required": 1,
    }
    redriven = await asyncio.to_thread(run_cli, stack, "dlq", "redrive", "--include-rejected")
    how = "SQS message move task" if two_sqs.name == "localstack" else "receive, send, delete"
    assert (redriven.returncode, redriven.stdout) == (
        0,
        f"redriven 2 to the converse queue ({how})\n",
    ), redriven.stderr
    moved = await stack.drain("CONVERSE_QUEUE_URL", expect=2)
    assert sorted(message["Body"] for message in moved) == sorted(bodies)
    assert await depth(stack, url) == 0


async def test_pointers_out_of_bounds_reach_the_dead_letter_queue_each_with_its_reason(
    two_sqs: Sqs,
) -> None:
    """Three pointer commands the stage must not serve, each dead-lettered with its own
    reason on both implementations: one naming a bucket other than PAYLOAD_BUCKET (which
    exists and holds the object: the bucket alone is refused), one whose object is a byte
    over the default PAYLOAD_MAX_BYTES, one whose object is missing. A valid pointer beside
    them is served."""
    stack = two_sqs.stack
    bucket = stack.env["PAYLOAD_BUCKET"]
    other = f"{stack.resources.prefix}-elsewhere"
    await stack.clients.s3.create_bucket(Bucket=other)
    await stack.seed("matter-bounds", exchanges(2))
    command = json.dumps(
        {"type": "converse", "command_id": "c-ok", "conversation_id": "matter-bounds",
         "message": "PRIVILEGED question"}
    ).encode()  # fmt: skip
    max_bytes = stack.settings().payload_max_bytes
    objects = {
        (other, "in/elsewhere.json"): command,
        (bucket, "in/huge.json"): b" " * max_bytes + b"x",  # one byte over the bound
        (bucket, "in/ok.json"): command,
    }
    for (name, key), data in objects.items():
        await stack.clients.s3.put_object(Bucket=name, Key=key, Body=data)
    expected = {
        pointer_body(other, "in/elsewhere.json"): (
            f"the S3 pointer names a bucket this stage does not read: {other}"
        ),
        pointer_body(bucket, "in/huge.json"): (
            f"the S3 pointer's object is over PAYLOAD_MAX_BYTES ({max_bytes})"
        ),
        pointer_body(bucket, "in/missing.json"): (
            "the S3 pointer names an object that does not exist"
        ),
    }
    for body in [*expected, pointer_body(bucket, "in/ok.json")]:
        await stack.clients.sqs.send_message(
            QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
            MessageBody=body,
            MessageAttributes={SIZE_ATTRIBUTE: {"DataType": "Number", "StringValue": "100"}},
        )
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
            dead = await stack.drain(await stack.dead_letter_url(), expect=3)
    assert body_of(prompt)["command_id"] == "c-ok"
    reasons = {m["Body"]: m["MessageAttributes"]["RejectionReason"]["StringValue"] for m in dead}
    assert reasons == expected
    rejected = [e for e in logs if e["event"] == "clerk.converse_command_rejected"]
    assert sorted(e["reason"] for e in rejected) == sorted(expected.values())
    assert "PRIVILEGED" not in repr(logs)


async def test_the_inbound_trace_header_reaches_the_model_and_compaction_queues(
    two_sqs: Sqs,
) -> None:
    """The prompt leaves in a SendMessageBatch, the fold request in a SendMessage: both
    carry the command's AWSTraceHeader (no SDK configured: passed on unchanged). moto drops
    it from batch entries; the moto fixture puts it back, as LocalStack and SQS keep it."""
    stack = two_sqs.stack
    await stack.seed("matter-trace", exchanges(20), folded_through=0)
    await stack.clients.sqs.send_message(
        QueueUrl=stack.env["CONVERSE_QUEUE_URL"],
        MessageBody=json.dumps(
            {
                "type": "converse",
                "command_id": "c-trace",
                "conversation_id": "matter-trace",
                "message": "Can the buyer terminate?",
            }
        ),
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": INBOUND}},
    )
    async with running_worker(stack.settings()):
        [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
        [fold] = await stack.drain("COMPACTION_QUEUE_URL", expect=1)
    assert prompt["Attributes"]["AWSTraceHeader"] == INBOUND
    assert fold["Attributes"]["AWSTraceHeader"] == INBOUND


async def test_batch_calls_report_each_entry_sqs_refused_and_only_those(two_sqs: Sqs) -> None:
    """SendMessageBatch with one entry over the queue's MaximumMessageSize: LocalStack
    refuses that entry alone, moto the whole call; either way every entry reported sent is
    on the queue and none other. DeleteMessageBatch: a handle of a message already deleted
    succeeds on both (deletes are idempotent), a malformed handle is that entry's failure."""
    stack = two_sqs.stack
    created = await stack.clients.sqs.create_queue(
        QueueName=f"{stack.resources.prefix}-small", Attributes={"MaximumMessageSize": "1024"}
    )
    queue = SqsQueue(stack.clients.sqs, created["QueueUrl"])
    batch = [OutboundMessage(body, "g", body[:8]) for body in ("first", "x" * 2000, "third")]
    if two_sqs.name == "localstack":
        first, refused, third = await queue.send_batch(batch)
        assert isinstance(first, str) and isinstance(third, str)
        assert isinstance(refused, StoreUnavailable)
        assert "InvalidParameterValue" in str(refused)
        expected = ["first", "third"]
    else:
        with pytest.raises(StoreUnavailable, match="InvalidParameterValue"):
            await queue.send_batch(batch)
        expected = []
    received = await queue.receive(10, 1)
    assert sorted(message.body for message in received) == expected

    for body in ("one", "two"):
        await queue.send(body, group_id="g", deduplication_id=body)
    one, two = sorted(await receive_all(queue, 2), key=lambda message: message.body)
    assert await queue.delete_batch([one]) == []
    malformed = ReceivedMessage("m-malformed", "not-a-receipt-handle", "")
    assert await queue.delete_batch([one, two, malformed]) == [
        DeleteFailure("m-malformed", "ReceiptHandleIsInvalid")
    ]
    assert await queue.receive(10, 1, visibility_timeout=0) == []


async def receive_all(queue: SqsQueue, count: int) -> list[ReceivedMessage]:
    received: list[ReceivedMessage] = []
    async with asyncio.timeout(30):  # they are on the queue: this bounds a failure only
        while len(received) < count:
            received += await queue.receive(10, 1)
    return received


async def test_a_cancelled_move_task_is_reported_with_its_status_and_a_non_zero_exit(
    localstack_stack: Stack,
) -> None:
    """GIVEN 30 messages in the dead-letter queue and `worker dlq redrive --include-rejected
    --rate 1` moving them with SQS's move task, WHEN the task is cancelled while it runs,
    THEN the tool says how it ended and exits 1, and what it did not move stays in the
    dead-letter queue: nothing else moves it, at any rate."""
    stack = localstack_stack
    url = await stack.dead_letter_url()
    for start in range(0, 30, 10):
        await stack.clients.sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "MessageBody": f"m-{i}"} for i in range(start, start + 10)],
        )
    arn = (await stack.clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"]))[
        "Attributes"
    ]["QueueArn"]
    redriving = asyncio.create_task(
        asyncio.to_thread(run_cli, stack, "dlq", "redrive", "--include-rejected", "--rate", "1")
    )
    async with asyncio.timeout(30):
        while True:
            tasks = (await stack.clients.sqs.list_message_move_tasks(SourceArn=arn))["Results"]
            running = [t for t in tasks if t["Status"] == "RUNNING"]
            if running:
                break
            await asyncio.sleep(0.2)
    await stack.clients.sqs.cancel_message_move_task(TaskHandle=running[0]["TaskHandle"])
    result = await redriving
    assert result.returncode == 1, result.stderr
    moved = int(result.stdout.split()[1])
    assert result.stdout == f"redriven {moved} to the converse queue (SQS message move task)\n"
    assert result.stderr.startswith("worker: the SQS message move task ended CANCELL")
    assert result.stderr.endswith("; what it did not move stays in the dead-letter queue\n")
    left = await depth(stack, url)
    assert left > 0  # the rest was not moved some other way
    assert left + await depth(stack, stack.env["CONVERSE_QUEUE_URL"]) == 30
