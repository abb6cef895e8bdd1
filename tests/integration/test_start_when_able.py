"""Start only when able, over the real ``worker run``: a resource it cannot use stops it with
exit code 2 and one line on stderr naming the setting, the resource and the refusal; an
endpoint that does not answer stops it once STARTUP_TIMEOUT_SECONDS has passed; one that
comes back within it lets it start and serve. ``worker health`` fails while it checks.

Truth is by exit codes, lines and events; the one time asserted is the issue's own bound
(60 s) on a refusal, which a refusal meets in a round trip or two."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path

import pytest

from localaws.endpoints import free_port
from localaws.fault_proxy import Fault, FaultProxy
from localaws.proxy import TcpProxy
from tests.integration.conftest import Stack, body_of
from tests.integration.test_brownout import WorkerProcess, worker_process
from worker.adapters.reachability import PROBE_CONVERSATION
from worker.telemetry.probe import check

pytestmark = pytest.mark.integration

#: The issue's bound on a refusal: "exits non-zero within 60 seconds".
REFUSAL_BOUND = 60.0


async def exit_code(worker: WorkerProcess, *, within: float) -> int:
    async with asyncio.timeout(within):
        return await worker.process.wait()


async def test_a_model_queue_that_does_not_exist_stops_worker_run_naming_it(
    stack: Stack, tmp_path: Path
) -> None:
    missing = stack.env["MODEL_QUEUE_URL"].rsplit("/", 1)[0] + "/mira-no-such-model"
    async with worker_process(
        stack, stack.endpoint, MODEL_QUEUE_URL=missing, HEALTH_FILE=str(tmp_path / "health")
    ) as worker:
        code = await exit_code(worker, within=REFUSAL_BOUND)
    assert code == 2
    [line] = worker.stderr.decode().splitlines()
    assert line == (
        f"worker: MODEL_QUEUE_URL ({missing}): the queue does not exist "
        "(AWS.SimpleQueueService.NonExistentQueue)"
    )
    [refused] = worker.of("clerk.converse_resource_refused")
    assert (refused["setting"], refused["resource"]) == ("MODEL_QUEUE_URL", missing)
    assert worker.count("clerk.converse_worker_started") == 0
    assert not (tmp_path / "health").exists()


@pytest.mark.parametrize(
    ("setting", "operation"),
    [
        ("HISTORY_TABLE", "Query"),
        ("HISTORY_TABLE", "UpdateItem"),
        ("LEDGER_TABLE", "GetItem"),
        ("LEDGER_TABLE", "UpdateItem"),
    ],
)
async def test_a_table_the_role_may_not_use_stops_worker_run_naming_it(
    stack: Stack, setting: str, operation: str
) -> None:
    """IAM's refusal (the fault proxy answers as DynamoDB does, ``AccessDeniedException``
    on HTTP 400) of the one table and operation; every other call goes through."""
    table = stack.env[setting]
    proxy = FaultProxy(stack.endpoint)
    endpoint = await proxy.start()
    try:
        proxy.inject(Fault("dynamodb", "denied", operations=(operation,), table=table))
        async with worker_process(stack, endpoint) as worker:
            code = await exit_code(worker, within=REFUSAL_BOUND)
    finally:
        await proxy.close()
    assert code == 2
    [line] = worker.stderr.decode().splitlines()
    assert line == (
        f"worker: {setting} ({table}): the role may not call dynamodb:{operation} on it "
        "(AccessDeniedException)"
    )
    assert "not authorized" not in worker.stderr.decode()  # never IAM's own text
    assert proxy.snapshot().of("dynamodb", operation)[1] == 1  # refused once, not retried


async def test_an_endpoint_down_for_the_whole_bound_stops_worker_run_after_it(
    stack: Stack, tmp_path: Path
) -> None:
    """Nothing listens at the endpoint: each check fails to connect, is tried again inside
    the bound, and the worker stops when it ends, naming what did not answer. Meanwhile the
    health file says the worker is starting, and `worker health` fails."""
    down = f"http://127.0.0.1:{free_port()}"
    health = tmp_path / "health"
    readings: list[tuple[bool, str]] = []
    async with worker_process(
        stack, down, STARTUP_TIMEOUT_SECONDS="4", HEALTH_FILE=str(health)
    ) as worker:
        async with asyncio.timeout(REFUSAL_BOUND):
            while worker.process.returncode is None:
                if health.exists():
                    with contextlib.suppress(FileNotFoundError):
                        readings.append(check(health, time.time()))
                await asyncio.sleep(0.1)
    assert worker.process.returncode == 2
    [line] = worker.stderr.decode().splitlines()
    assert line.startswith(
        "worker: not every resource answered within STARTUP_TIMEOUT_SECONDS (4 s): "
        f"CONVERSE_QUEUE_URL ({stack.env['CONVERSE_QUEUE_URL']}): sqs.GetQueueAttributes "
        "failed: EndpointConnectionError; "
    )
    for setting in ("MODEL_QUEUE_URL", "COMPACTION_QUEUE_URL", "HISTORY_TABLE", "LEDGER_TABLE"):
        assert f"{setting} ({stack.env[setting]}): " in line
    retried = {e["setting"] for e in worker.of("clerk.converse_resource_check_failed")}
    assert "MODEL_QUEUE_URL" in retried
    assert (
        max(e["attempts"] for e in worker.of("clerk.converse_resource_unanswered")) >= 2
    )  # tried again inside the bound
    assert readings, "the health file was never seen while the worker was starting"
    assert all(not ok and "the worker is starting" in said for ok, said in readings), readings
    assert not health.exists()


async def test_an_endpoint_down_at_start_then_back_lets_the_worker_start_and_serve(
    stack: Stack, tmp_path: Path
) -> None:
    """The endpoint refuses connections when the worker starts, and comes back once the
    worker has retried: it starts, serves a command, and its probes wrote nothing."""
    proxy = TcpProxy(stack.endpoint)
    endpoint = await proxy.start()
    await proxy.cut()
    health = tmp_path / "health"
    try:
        async with worker_process(
            stack, endpoint, STARTUP_TIMEOUT_SECONDS="120", HEALTH_FILE=str(health)
        ) as worker:
            await worker.until("clerk.converse_resource_check_failed", within=60)
            starting = check(health, time.time())
            await proxy.restore()
            await worker.until("clerk.converse_worker_started", within=120)
            await stack.send_command(command_id="c-1", conversation_id="matter-1")
            [prompt] = await stack.drain("MODEL_QUEUE_URL", expect=1)
            async with asyncio.timeout(60):  # the next write of the health file
                while not check(health, time.time())[0]:
                    await asyncio.sleep(0.1)
            assert await worker.stop() == 0
    finally:
        await proxy.close()
    assert starting[0] is False and "the worker is starting" in starting[1]
    assert body_of(prompt)["command_id"] == "c-1"
    assert worker.count("clerk.converse_resource_refused") == 0
    for table in (stack.env["HISTORY_TABLE"], stack.env["LEDGER_TABLE"]):
        scanned = await stack.clients.dynamodb.scan(TableName=table)
        assert [i for i in scanned["Items"] if i["pk"]["S"] == PROBE_CONVERSATION] == []


async def test_a_stop_during_the_checks_exits_zero_at_once(stack: Stack) -> None:
    """SIGTERM while the checks wait out an endpoint that is down, with a bound of five
    minutes: the worker exits 0 without waiting for the bound."""
    down = f"http://127.0.0.1:{free_port()}"
    async with worker_process(stack, down, STARTUP_TIMEOUT_SECONDS="300") as worker:
        await worker.until("clerk.converse_resource_check_failed", within=60)
        worker.process.send_signal(signal.SIGTERM)
        code = await exit_code(worker, within=30)
    assert code == 0
    assert worker.stderr == b""
