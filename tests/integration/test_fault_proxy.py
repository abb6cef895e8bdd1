"""The fault proxy (``localaws.fault_proxy``): each error it injects parses in boto3 and in
aiobotocore as the service's own error code, botocore retries it as AWS's would be retried
(attempts counted through the proxy), ``UnprocessedItems`` comes back as the request's
items, and the retry quota runs out after 100 retries, as botocore's standard mode says.

botocore's backoff between attempts is set to zero here: the attempts are what is counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from localaws.fault_proxy import Fault, FaultProxy, threaded_fault_proxy
from tests.integration.conftest import Stack
from worker.adapters.client_errors import aws_call
from worker.adapters.sqs import SqsQueue
from worker.app.runtime import RETRIES as RETRIES_OF_THE_WORKER
from worker.app.runtime import aws_clients
from worker.errors import StoreUnavailable

pytestmark = pytest.mark.integration

#: Three attempts in all (``max_attempts`` would count retries only).
RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 3})


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    from botocore.retries.standard import ExponentialBackoff

    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)


def call(stack: Stack, service: str, operation: str) -> tuple[str, dict[str, Any]]:
    """The boto3 method and arguments of one call to each service the worker makes."""
    env = stack.env
    key = {"pk": {"S": "probe"}, "sk": {"S": "x"}}
    calls: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
        ("dynamodb", "GetItem"): ("get_item", {"TableName": env["HISTORY_TABLE"], "Key": key}),
        ("dynamodb", "UpdateItem"): (
            "update_item",
            {
                "TableName": env["HISTORY_TABLE"],
                "Key": key,
                "UpdateExpression": "SET a = :a",
                "ExpressionAttributeValues": {":a": {"S": "1"}},
            },
        ),
        ("sqs", "SendMessageBatch"): (
            "send_message_batch",
            {
                "QueueUrl": env["MODEL_QUEUE_URL"],
                "Entries": [{"Id": "0", "MessageBody": "{}"}],
            },
        ),
        ("sqs", "ReceiveMessage"): (
            "receive_message",
            {"QueueUrl": env["CONVERSE_QUEUE_URL"], "WaitTimeSeconds": 0},
        ),
        ("s3", "PutObject"): (
            "put_object",
            {"Bucket": env["PAYLOAD_BUCKET"], "Key": "k", "Body": b"x"},
        ),
        ("s3", "GetObject"): ("get_object", {"Bucket": env["PAYLOAD_BUCKET"], "Key": "k"}),
    }
    return calls[(service, operation)]


#: (service, operation, error) → the code botocore reads, and the attempts it makes (3:
#: retried as throttling or transient).
CASES = [
    ("dynamodb", "GetItem", "throughput", "ProvisionedThroughputExceededException", 400),
    ("dynamodb", "UpdateItem", "throttling", "ThrottlingException", 400),
    ("dynamodb", "GetItem", "server", "InternalServerError", 500),
    ("sqs", "SendMessageBatch", "throttled", "RequestThrottled", 400),
    ("sqs", "SendMessageBatch", "throttling", "ThrottlingException", 400),
    ("sqs", "ReceiveMessage", "server", "InternalError", 500),
    ("s3", "PutObject", "throttling", "SlowDown", 503),
    ("s3", "GetObject", "server", "InternalError", 500),
]


@pytest.fixture
def threaded(stack: Stack) -> Iterator[FaultProxy]:
    with threaded_fault_proxy(stack.endpoint) as proxy:
        yield proxy


@pytest.mark.parametrize(("service", "operation", "error", "code", "status"), CASES)
def test_each_error_parses_in_boto3_as_the_services_own_and_is_retried(
    stack: Stack,
    threaded: FaultProxy,
    service: str,
    operation: str,
    error: str,
    code: str,
    status: int,
) -> None:
    client = boto3.client(service, endpoint_url=threaded.endpoint, config=RETRIES)
    method, arguments = call(stack, service, operation)
    if service == "s3":  # the object GetObject reads once the fault is cleared
        direct = boto3.client("s3", endpoint_url=stack.endpoint)
        direct.put_object(Bucket=stack.env["PAYLOAD_BUCKET"], Key="k", Body=b"x")
    threaded.inject(Fault(service, error, operations=(operation,)))
    with pytest.raises(ClientError) as raised:
        getattr(client, method)(**arguments)
    assert raised.value.response["Error"]["Code"] == code
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert raised.value.response["ResponseMetadata"]["RetryAttempts"] == 2
    assert threaded.snapshot().of(service, operation) == (3, 3)
    threaded.clear()
    getattr(client, method)(**arguments)  # passed on to moto again
    assert threaded.snapshot().of(service, operation) == (4, 3)


@pytest.mark.parametrize(("service", "operation", "error", "code", "status"), CASES)
async def test_each_error_parses_in_aiobotocore_and_the_worker_names_its_kind(
    stack: Stack, service: str, operation: str, error: str, code: str, status: int
) -> None:
    import aioboto3
    from aiobotocore.config import AioConfig

    proxy = FaultProxy(stack.endpoint)
    endpoint = await proxy.start()
    try:
        session = aioboto3.Session()
        config = AioConfig(retries={"mode": "standard", "total_max_attempts": 3})
        async with session.client(service, endpoint_url=endpoint, config=config) as client:
            method, arguments = call(stack, service, operation)
            proxy.inject(Fault(service, error, operations=(operation,)))

            async def once() -> None:
                with aws_call(f"{service}.{operation}"):
                    response = await getattr(client, method)(**arguments)
                    if operation == "GetObject":
                        await response["Body"].read()

            with pytest.raises(StoreUnavailable) as raised:
                await once()
            cause = raised.value.__cause__
            assert isinstance(cause, ClientError)
            assert cause.response["Error"]["Code"] == code
            assert raised.value.service == service
            assert raised.value.kind == ("server" if error == "server" else "throttled")
            assert proxy.snapshot().of(service, operation) == (3, 3)
    finally:
        await proxy.close()


def test_unprocessed_items_come_back_as_the_requests_items(
    stack: Stack, threaded: FaultProxy
) -> None:
    client = boto3.client("dynamodb", endpoint_url=threaded.endpoint, config=RETRIES)
    table = stack.env["HISTORY_TABLE"]
    items = [
        {"PutRequest": {"Item": {"pk": {"S": "c"}, "sk": {"S": f"cmd#{i}"}}}} for i in range(3)
    ]
    threaded.inject(Fault("dynamodb", "unprocessed", operations=("BatchWriteItem",)))
    response = client.batch_write_item(RequestItems={table: items})
    assert response["UnprocessedItems"] == {table: items}
    assert threaded.snapshot().of("dynamodb", "BatchWriteItem") == (1, 1)  # a 200: no retry


def test_a_share_of_requests_and_only_the_queue_named(stack: Stack, threaded: FaultProxy) -> None:
    """A 25% share answers about a quarter (seeded, so the same each run); a fault on the
    model queue's sends leaves the converse queue's alone."""
    once = Config(retries={"mode": "standard", "total_max_attempts": 1})
    client = boto3.client("sqs", endpoint_url=threaded.endpoint, config=once)
    threaded.inject(Fault("dynamodb", "throttling", share=0.25))
    dynamodb = boto3.client("dynamodb", endpoint_url=threaded.endpoint, config=once)
    failed = 0
    for _ in range(200):
        try:
            dynamodb.get_item(**call(stack, "dynamodb", "GetItem")[1])
        except ClientError:
            failed += 1
    assert 30 <= failed <= 70
    threaded.clear()
    model = stack.env["MODEL_QUEUE_URL"].rsplit("/", 1)[-1]
    threaded.inject(Fault("sqs", "throttled", operations=("SendMessage",), queue=model))
    client.send_message(QueueUrl=stack.env["CONVERSE_QUEUE_URL"], MessageBody="{}")
    with pytest.raises(ClientError):
        client.send_message(QueueUrl=stack.env["MODEL_QUEUE_URL"], MessageBody="{}")


async def test_a_denied_dynamodb_call_is_a_refusal_never_retried_of_the_table_named(
    stack: Stack,
) -> None:
    """As IAM answers it (HTTP 400, ``AccessDeniedException``): botocore does not retry it,
    the worker reads it as refused, by its code, never quoting the message; a fault on the
    history table leaves the ledger table alone."""
    import aioboto3
    from aiobotocore.config import AioConfig

    proxy = FaultProxy(stack.endpoint)
    endpoint = await proxy.start()
    history, ledger = stack.env["HISTORY_TABLE"], stack.env["LEDGER_TABLE"]
    key = {"pk": {"S": "probe"}, "sk": {"S": "x"}}
    try:
        proxy.inject(Fault("dynamodb", "denied", operations=("GetItem",), table=history))
        config = AioConfig(retries={"mode": "standard", "total_max_attempts": 3})
        async with aioboto3.Session().client(
            "dynamodb", endpoint_url=endpoint, config=config
        ) as client:
            with pytest.raises(StoreUnavailable) as raised, aws_call("dynamodb.GetItem"):
                await client.get_item(TableName=history, Key=key)
            await client.get_item(TableName=ledger, Key=key)
    finally:
        await proxy.close()
    cause = raised.value.__cause__
    assert isinstance(cause, ClientError)
    assert cause.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert (raised.value.kind, raised.value.code) == ("refused", "AccessDeniedException")
    assert "not authorized" not in str(raised.value)
    assert proxy.snapshot().of("dynamodb", "GetItem") == (2, 1)  # one attempt, one passed


def test_the_retry_quota_runs_out_after_100_retries_in_a_full_brownout(
    stack: Stack, threaded: FaultProxy
) -> None:
    """The worker's retries (standard mode, four attempts): 500 tokens, 5 a retry. 33
    throttled calls take four attempts each (99 retries), the 34th gets the last token's
    retry, and every call after that takes one attempt: the quota is spent and nothing
    refills it while nothing succeeds (a success gives back 1)."""
    config = Config(retries=RETRIES_OF_THE_WORKER)
    client = boto3.client("dynamodb", endpoint_url=threaded.endpoint, config=config)
    _, arguments = call(stack, "dynamodb", "GetItem")
    threaded.inject(Fault("dynamodb", "throughput"))
    attempts = []
    for _ in range(40):
        before = threaded.snapshot().of("dynamodb")[0]
        with pytest.raises(ClientError):
            client.get_item(**arguments)
        attempts.append(threaded.snapshot().of("dynamodb")[0] - before)
    assert attempts == [4] * 33 + [2] + [1] * 6


async def test_the_workers_receive_is_never_retried_and_its_other_calls_are(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop's bound holds only if a receive is one attempt: a 500 on ReceiveMessage
    reaches the server once per receive; a 500 on a send is tried four times."""
    proxy = FaultProxy(stack.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", await proxy.start())
    try:
        async with aws_clients() as clients:
            converse = SqsQueue(
                clients.sqs, stack.env["CONVERSE_QUEUE_URL"], receive_client=clients.sqs_receive
            )
            proxy.inject(Fault("sqs", "server", operations=("ReceiveMessage", "SendMessage")))
            for _ in range(3):
                with pytest.raises(StoreUnavailable):
                    await converse.receive(10, 1)
            assert proxy.snapshot().of("sqs", "ReceiveMessage") == (3, 3)
            with pytest.raises(StoreUnavailable):
                await converse.send("{}", group_id="g", deduplication_id="d")
            assert proxy.snapshot().of("sqs", "SendMessage") == (4, 4)
    finally:
        await proxy.close()


def test_a_5xx_after_the_fact_executes_every_attempt(stack: Stack, threaded: FaultProxy) -> None:
    """``after``: the send reaches SQS each time and is answered 500 each time, so the
    caller's retries leave one copy per attempt (the residual window of a lost response)."""
    client = boto3.client("sqs", endpoint_url=threaded.endpoint, config=RETRIES)
    url = stack.env["MODEL_QUEUE_URL"]
    threaded.inject(Fault("sqs", "server", operations=("SendMessage",), after=True))
    with pytest.raises(ClientError):
        client.send_message(QueueUrl=url, MessageBody="{}")
    direct = boto3.client("sqs", endpoint_url=stack.endpoint)
    attributes = direct.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "3"
