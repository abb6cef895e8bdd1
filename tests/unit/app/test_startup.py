"""Start only when able, on virtual time: every resource checked side by side within one
bound, passing failures retried inside it, a refusal ending it at once, one line naming what
failed, and `worker health` failing until the consumer runs."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.conftest import captured_logs, settings
from tests.unit.clock import FakeClock
from tests.unit.consumer.test_consumer import Run, policy
from worker.adapters.client_errors import aws_call
from worker.adapters.dynamodb import STAGE_STATE_ATTRIBUTES
from worker.adapters.reachability import (
    HISTORY_PROBE_ATTRIBUTE,
    NEVER,
    history_probe_update,
    ledger_probe_update,
    refusal,
)
from worker.adapters.sqs import SqsQueue
from worker.app.startup import Check, converse_queue, resource_checks, run_checks
from worker.errors import ConfigError, StoreUnavailable
from worker.telemetry.liveness import HealthFile, Liveness
from worker.telemetry.probe import check

MODEL = "https://sqs.eu-west-1.amazonaws.com/123456789012/mira-model"
BOUND = 20.0


def highest(low: float, high: float) -> float:
    return high


def lowest(low: float, high: float) -> float:
    return low


def throttled(operation: str = "sqs.GetQueueAttributes") -> StoreUnavailable:
    return StoreUnavailable(
        f"{operation} failed: RequestThrottled (HTTP 400)",
        service=operation.split(".")[0],
        kind="throttled",
        operation=operation,
        code="RequestThrottled",
    )


def refused(code: str, operation: str = "sqs.GetQueueAttributes") -> StoreUnavailable:
    return StoreUnavailable(
        f"{operation} failed: {code} (HTTP 400)",
        service=operation.split(".")[0],
        kind="refused",
        operation=operation,
        code=code,
    )


@dataclass
class Resource:
    """A resource's check on the test's clock: each call takes ``seconds`` and then raises the
    next of ``failures`` (passes once they are spent); ``hang``: it never answers."""

    clock: FakeClock
    failures: list[BaseException] = field(default_factory=list)
    seconds: float = 0.0
    hang: bool = False
    forever: BaseException | None = None
    calls: list[float] = field(default_factory=list)
    cancelled: bool = False

    async def __call__(self) -> str:
        self.calls.append(self.clock.now)
        try:
            if self.hang:
                await asyncio.Event().wait()
            if self.seconds:
                await self.clock.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.forever is not None:
            raise self.forever
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


@dataclass
class Start:
    clock: FakeClock = field(default_factory=FakeClock)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def resource(self, **options: Any) -> Resource:
        return Resource(self.clock, **options)

    def begin(
        self, checks: list[Check], jitter: Callable[[float, float], float] = highest
    ) -> asyncio.Task[list[object] | None]:
        return asyncio.create_task(
            run_checks(checks, bound=BOUND, stopping=self.stopping, clock=self.clock, jitter=jitter)
        )

    async def finish(self, task: asyncio.Task[list[object] | None]) -> list[object] | None:
        await self.clock.run_until_done(task)
        return task.result()

    async def refusal(self, task: asyncio.Task[list[object] | None]) -> str:
        with pytest.raises(ConfigError) as raised:
            await self.clock.run_until_done(task)
        line = str(raised.value)
        assert "\n" not in line
        return line


@pytest.fixture
def start() -> Start:
    return Start()


async def test_every_resource_checked_side_by_side_takes_the_longest_check_not_the_sum(
    start: Start,
) -> None:
    resources = [start.resource(seconds=s) for s in (0.2, 0.5, 0.3)]
    checks = [Check(f"SETTING_{i}", f"r-{i}", r) for i, r in enumerate(resources)]
    with captured_logs() as logs:
        results = await start.finish(start.begin(checks))
    assert results == ["ok", "ok", "ok"]
    assert start.clock.now == 0.5
    assert [r.calls for r in resources] == [[0.0]] * 3
    checked = [e for e in logs if e["event"] == "clerk.converse_resource_checked"]
    assert sorted((e["setting"], e["resource"], e["attempts"]) for e in checked) == [
        ("SETTING_0", "r-0", 1),
        ("SETTING_1", "r-1", 1),
        ("SETTING_2", "r-2", 1),
    ]


async def test_a_passing_failure_is_retried_with_backoff_inside_the_bound(start: Start) -> None:
    """Throttled twice, then a connection error, then answered: tried again after 0.5 s,
    1 s and 2 s (the backoff's ceilings, at the jitter chosen), each failure logged."""
    down = StoreUnavailable(
        "sqs.GetQueueAttributes failed: EndpointConnectionError", kind="connection"
    )
    model = start.resource(failures=[throttled(), throttled(), down])
    with captured_logs() as logs:
        results = await start.finish(start.begin([Check("MODEL_QUEUE_URL", MODEL, model)]))
    assert results == ["ok"]
    assert model.calls == [0.0, 0.5, 1.5, 3.5]
    failed = [e for e in logs if e["event"] == "clerk.converse_resource_check_failed"]
    assert [(e["error"], e["retry_in"], e["log_level"]) for e in failed] == [
        ("sqs.GetQueueAttributes failed: RequestThrottled (HTTP 400)", 0.5, "warning"),
        ("sqs.GetQueueAttributes failed: RequestThrottled (HTTP 400)", 1.0, "warning"),
        ("sqs.GetQueueAttributes failed: EndpointConnectionError", 2.0, "warning"),
    ]
    [checked] = [e for e in logs if e["event"] == "clerk.converse_resource_checked"]
    assert checked["attempts"] == 4


async def test_the_backoff_is_jittered_in_the_upper_half_of_its_ceiling(start: Start) -> None:
    model = start.resource(failures=[throttled()] * 6)
    await start.finish(start.begin([Check("MODEL_QUEUE_URL", MODEL, model)], jitter=lowest))
    gaps = [b - a for a, b in zip(model.calls, model.calls[1:], strict=False)]
    assert gaps == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


async def test_a_refusal_ends_the_start_up_at_once_naming_the_setting_and_the_resource(
    start: Start,
) -> None:
    """The model queue does not exist; the history table is being throttled and would be
    retried for the whole bound: the start-up ends at the refusal, the other check cancelled,
    with one line that names MODEL_QUEUE_URL, its value and the service's code."""
    model = start.resource(forever=refused("AWS.SimpleQueueService.NonExistentQueue"))
    history = start.resource(forever=throttled("dynamodb.Query"))
    checks = [
        Check("HISTORY_TABLE", "mira-history", history),
        Check("MODEL_QUEUE_URL", MODEL, model),
    ]
    with captured_logs() as logs:
        line = await start.refusal(start.begin(checks))
    assert start.clock.now == 0.0
    assert line == (
        f"MODEL_QUEUE_URL ({MODEL}): the queue does not exist "
        "(AWS.SimpleQueueService.NonExistentQueue)"
    )
    assert model.calls == [0.0]
    assert history.calls == [0.0]  # not tried again
    [event] = [e for e in logs if e["event"] == "clerk.converse_resource_refused"]
    assert (event["setting"], event["resource"], event["log_level"]) == (
        "MODEL_QUEUE_URL",
        MODEL,
        "error",
    )


async def test_the_other_checks_are_cancelled_at_a_refusal(start: Start) -> None:
    slow = start.resource(hang=True)
    model = start.resource(forever=refused("AccessDenied"))
    checks = [Check("HISTORY_TABLE", "h", slow), Check("MODEL_QUEUE_URL", MODEL, model)]
    await start.refusal(start.begin(checks))
    assert slow.cancelled


async def test_refusals_answered_together_share_the_line_in_the_checks_order(
    start: Start,
) -> None:
    missing = refused("AWS.SimpleQueueService.NonExistentQueue")
    checks = [
        Check("MODEL_QUEUE_URL", MODEL, start.resource(forever=missing)),
        Check(
            "LEDGER_TABLE",
            "mira-ledger",
            start.resource(forever=refused("ResourceNotFoundException", "dynamodb.GetItem")),
        ),
    ]
    line = await start.refusal(start.begin(checks))
    assert line == (
        f"MODEL_QUEUE_URL ({MODEL}): the queue does not exist "
        "(AWS.SimpleQueueService.NonExistentQueue); "
        "LEDGER_TABLE (mira-ledger): the table does not exist (ResourceNotFoundException)"
    )


async def test_a_check_still_failing_at_the_bound_ends_the_start_up_there_naming_it(
    start: Start,
) -> None:
    """Throttled for the whole bound: the start-up ends at exactly STARTUP_TIMEOUT_SECONDS
    with the last failure; a check still waiting for its answer is named too, one that
    answered is not."""
    model = start.resource(forever=throttled())
    history = start.resource(hang=True)
    ledger = start.resource()
    checks = [
        Check("MODEL_QUEUE_URL", MODEL, model),
        Check("HISTORY_TABLE", "mira-history", history),
        Check("LEDGER_TABLE", "mira-ledger", ledger),
    ]
    with captured_logs() as logs:
        line = await start.refusal(start.begin(checks))
    assert start.clock.now == BOUND
    assert line == (
        "not every resource answered within STARTUP_TIMEOUT_SECONDS (20 s): "
        f"MODEL_QUEUE_URL ({MODEL}): sqs.GetQueueAttributes failed: RequestThrottled "
        "(HTTP 400); HISTORY_TABLE (mira-history): no answer yet"
    )
    # 0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5: every attempt inside the bound.
    assert model.calls == [0.0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5]
    assert history.cancelled
    unanswered = [e for e in logs if e["event"] == "clerk.converse_resource_unanswered"]
    assert [(e["setting"], e["attempts"]) for e in unanswered] == [
        ("MODEL_QUEUE_URL", 8),
        ("HISTORY_TABLE", 1),
    ]


async def test_a_stop_during_the_checks_ends_them_at_once(start: Start) -> None:
    model = start.resource(forever=throttled())
    task = start.begin([Check("MODEL_QUEUE_URL", MODEL, model)])
    await start.clock.advance(3.0)
    start.stopping.set()
    assert await start.finish(task) is None
    assert start.clock.now == 3.0
    assert model.calls == [0.0, 0.5, 1.5]


async def test_a_defect_in_a_check_is_raised_as_it_is(start: Start) -> None:
    broken = start.resource(forever=KeyError("Attributes"))
    with pytest.raises(KeyError):
        await start.finish(start.begin([Check("MODEL_QUEUE_URL", MODEL, broken)]))


async def test_health_fails_while_the_checks_run_and_passes_once_the_consumer_runs(
    tmp_path: Path,
) -> None:
    """The liveness of the real wiring: starting from its first write, through a start-up
    longer than the loops' bound whose checks keep being throttled; running, and healthy,
    once the consumer has begun."""
    run = Run()
    liveness = Liveness(run.clock, max_silence=25.0)
    path = tmp_path / "health"
    writer = HealthFile(path, liveness, clock=run.clock, wall=lambda: 1_000.0 + run.clock.now)
    written = asyncio.Event()
    writing = asyncio.create_task(writer.run(written))
    model = Resource(run.clock, failures=[throttled()] * 7)
    checks = [Check("MODEL_QUEUE_URL", MODEL, model)]
    task = asyncio.create_task(
        run_checks(checks, bound=60.0, stopping=run.stopping, clock=run.clock, jitter=highest)
    )
    seen = []
    for _ in range(6):
        await run.clock.advance(5)
        seen.append(check(path, 1_000.0 + run.clock.now))
    assert [ok for ok, _ in seen] == [False] * 6
    assert (
        seen[-1][1]
        == "unhealthy: the worker is starting: it has been checking its resources for 30 s"
    )
    await run.clock.run_until_done(task)
    run.start(policy(receive_wait_seconds=20), liveness=liveness)
    await run.clock.advance(5)
    assert check(path, 1_000.0 + run.clock.now)[0] is True
    await run.stop_at(run.clock.now)
    written.set()
    await run.clock.run_until_done(writing)


# -- the one line -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "code", "said"),
    [
        (
            "sqs.GetQueueAttributes",
            "AWS.SimpleQueueService.NonExistentQueue",
            "the queue does not exist (AWS.SimpleQueueService.NonExistentQueue)",
        ),
        ("sqs.GetQueueUrl", "QueueDoesNotExist", "the queue does not exist (QueueDoesNotExist)"),
        (
            "dynamodb.Query",
            "ResourceNotFoundException",
            "the table does not exist (ResourceNotFoundException)",
        ),
        ("s3.HeadBucket", "404", "the bucket does not exist (HTTP 404)"),
        ("s3.HeadBucket", "NoSuchBucket", "the bucket does not exist (NoSuchBucket)"),
        (
            "dynamodb.UpdateItem",
            "AccessDeniedException",
            "the role may not call dynamodb:UpdateItem on it (AccessDeniedException)",
        ),
        (
            "sqs.GetQueueAttributes",
            "AccessDenied",
            "the role may not call sqs:GetQueueAttributes on it (AccessDenied)",
        ),
        ("s3.HeadBucket", "403", "the role may not call s3:ListBucket on it (HTTP 403)"),
        (
            "dynamodb.Query",
            "UnrecognizedClientException",
            "the credentials were refused (UnrecognizedClientException)",
        ),
        (
            "dynamodb.Query",
            "ValidationException",
            "dynamodb.Query was refused (ValidationException)",
        ),
    ],
)
def test_a_refusal_says_what_it_means_and_the_services_code(
    operation: str, code: str, said: str
) -> None:
    assert refusal(refused(code, operation)) == said


def test_a_refusal_never_repeats_the_services_own_message() -> None:
    """AWS's message text can quote request values: the line is built from the code."""
    answer = {
        "Error": {"Code": "AccessDeniedException", "Message": "User arn:aws:sts::1:x SECRET"},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }
    with pytest.raises(StoreUnavailable) as raised, aws_call("dynamodb.Query"):
        raise ClientError(answer, "Query")  # type: ignore[arg-type]
    assert "SECRET" not in refusal(raised.value)
    assert "SECRET" not in str(raised.value)
    assert (raised.value.operation, raised.value.code) == (
        "dynamodb.Query",
        "AccessDeniedException",
    )


def test_an_endpoint_that_cannot_be_reached_is_a_passing_failure() -> None:
    with pytest.raises(StoreUnavailable) as raised, aws_call("sqs.GetQueueAttributes"):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
    assert raised.value.kind == "connection"


# -- what is checked ----------------------------------------------------------------------------


def test_every_resource_the_settings_name_is_checked_each_bucket_once() -> None:
    clients: Any = object()
    checks = resource_checks(
        settings(payload_bucket="mira-payloads", payload_read_buckets="in-a,mira-payloads,in-b"),
        sqs=clients,
        dynamodb=clients,
        s3=clients,
    )
    assert [(c.setting, c.resource) for c in checks] == [
        ("CONVERSE_QUEUE_URL", "http://127.0.0.1:1/q/converse"),
        ("MODEL_QUEUE_URL", "http://127.0.0.1:1/q/model"),
        ("COMPACTION_QUEUE_URL", "http://127.0.0.1:1/q/compaction"),
        ("HISTORY_TABLE", "history"),
        ("LEDGER_TABLE", "ledger"),
        ("PAYLOAD_BUCKET", "mira-payloads"),
        ("PAYLOAD_READ_BUCKETS", "in-a"),
        ("PAYLOAD_READ_BUCKETS", "in-b"),
    ]
    without = resource_checks(settings(), sqs=clients, dynamodb=clients, s3=clients)
    assert [c.setting for c in without][-1] == "LEDGER_TABLE"


#: The contract's attributes of the history table the stage may name in an UpdateItem.
CONTRACT_UPDATABLE = {"pk", "sk", *STAGE_STATE_ATTRIBUTES}


def test_the_history_tables_probe_update_names_only_the_stages_own_attributes() -> None:
    """An attribute-limited grant allows it: every name in its expressions is the contract's."""
    request = history_probe_update("mira-history")
    expressions = f"{request['UpdateExpression']} {request['ConditionExpression']}"
    # Every name but a function's, a value's (``:v``) and a keyword.
    words = set(re.findall(r"(?<![:#\w])[A-Za-z_]\w*(?!\w*\()", expressions)) - {"SET", "AND"}
    assert words == {HISTORY_PROBE_ATTRIBUTE, "pk"}
    assert words <= CONTRACT_UPDATABLE
    assert "ExpressionAttributeNames" not in request
    assert request["Key"]["sk"] == {"S": "state"}


@pytest.mark.parametrize("request_", [history_probe_update("h"), ledger_probe_update("l")])
def test_the_probe_updates_are_conditional_on_what_no_item_meets(request_: Any) -> None:
    assert (
        request_["ConditionExpression"]
        == NEVER
        == ("attribute_exists(pk) AND attribute_not_exists(pk)")
    )


# -- the converse queue -------------------------------------------------------------------------


@dataclass
class FakeSqs:
    """The converse queue's two start-up calls, answered from ``attributes``."""

    attributes: dict[str, str]
    dead_letter_error: ClientError | None = None

    async def get_queue_attributes(self, **request: Any) -> dict[str, Any]:
        return {"Attributes": self.attributes}

    async def get_queue_url(self, **request: Any) -> dict[str, Any]:
        if self.dead_letter_error is not None:
            raise self.dead_letter_error
        return {
            "QueueUrl": f"https://sqs/{request['QueueOwnerAWSAccountId']}/{request['QueueName']}"
        }


REDRIVE = json.dumps(
    {"deadLetterTargetArn": "arn:aws:sqs:eu-west-1:123456789012:mira-dlq", "maxReceiveCount": 5}
)
URL = "https://sqs/123456789012/mira-converse"


async def test_the_converse_queues_check_returns_its_visibility_and_dead_letter_queue() -> None:
    sqs: Any = FakeSqs({"VisibilityTimeout": "60", "RedrivePolicy": REDRIVE})
    described = await converse_queue(SqsQueue(sqs, URL), settings())
    assert (described.visibility_timeout, described.max_receive_count) == (60, 5)
    assert described.dead_letter is not None
    assert described.dead_letter.url == "https://sqs/123456789012/mira-dlq"


@pytest.mark.parametrize(
    ("attributes", "line"),
    [
        (
            {"VisibilityTimeout": "60"},
            "CONVERSE_QUEUE_URL: the queue has no RedrivePolicy, so rejected commands would "
            "have nowhere to go; give it a dead-letter queue",
        ),
        (
            {"VisibilityTimeout": "20", "RedrivePolicy": REDRIVE},
            "SHUTDOWN_GRACE_SECONDS (20) must be below the converse queue's VisibilityTimeout "
            "(20): work still draining must not be delivered to another worker",
        ),
    ],
)
async def test_a_converse_queue_that_cannot_be_run_safely_is_refused(
    attributes: dict[str, str], line: str
) -> None:
    sqs: Any = FakeSqs(attributes)
    with pytest.raises(ConfigError, match=re.escape(line)):
        await converse_queue(SqsQueue(sqs, URL), settings())


async def test_a_missing_dead_letter_queue_is_named_with_the_converse_queue() -> None:
    missing = ClientError(
        {
            "Error": {"Code": "AWS.SimpleQueueService.NonExistentQueue", "Message": "x"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "GetQueueUrl",
    )
    sqs: Any = FakeSqs({"VisibilityTimeout": "60", "RedrivePolicy": REDRIVE}, missing)
    with pytest.raises(ConfigError) as raised:
        await converse_queue(SqsQueue(sqs, URL), settings())
    assert str(raised.value) == (
        f"CONVERSE_QUEUE_URL ({URL}): its dead-letter queue mira-dlq (account 123456789012): "
        "the queue does not exist (AWS.SimpleQueueService.NonExistentQueue)"
    )
