"""Operating the real worker on the moto server: its EMF metrics, its traces across the
queues, and the liveness probe `worker health`."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests import emf
from tests.conftest import captured_logs
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.adapters.sqs import SqsQueue
from worker.telemetry import metrics as m
from worker.telemetry.probe import check

pytestmark = pytest.mark.integration

WORKER = [sys.executable, "-m", "worker.cli"]
ROOT = "1-5759e988-bd862e3fe1be46a994272793"
PARENT = "53995c3f42cd8ad8"
INBOUND = f"Root={ROOT};Parent={PARENT};Sampled=1"
SECRET = "PRIVILEGED question about clause 14.2"


def command(command_id: str, conversation_id: str, message: str = SECRET) -> str:
    return json.dumps(
        {
            "type": "converse",
            "command_id": command_id,
            "conversation_id": conversation_id,
            "message": message,
        }
    )


async def send(stack: Stack, body: str, trace_header: str | None = None) -> None:
    extra: dict[str, Any] = {}
    if trace_header:
        extra["MessageSystemAttributes"] = {
            "AWSTraceHeader": {"DataType": "String", "StringValue": trace_header}
        }
    await stack.clients.sqs.send_message(
        QueueUrl=stack.env["CONVERSE_QUEUE_URL"], MessageBody=body, **extra
    )


# -- metrics -----------------------------------------------------------------------------------


async def test_the_emf_output_meets_the_specification_and_counts_exactly_what_was_sent(
    stack: Stack,
) -> None:
    """GIVEN `worker run` with METRICS=emf flushing every second, WHEN it serves seven
    commands (one offloaded to S3, six on a conversation whose unfolded tail is 16 messages
    past the window), skips one duplicate and rejects three bodies of three kinds, THEN its
    stdout holds EMF documents that satisfy the specification, and summed over every
    interval and the flush at stop they count exactly that, with no id or text in them."""
    await stack.seed("matter-gap", exchanges(20), folded_through=0)
    await stack.seed("matter-big", exchanges(2))
    process = await stack.worker_process(
        "run", METRICS="emf", METRICS_FLUSH_SECONDS="1", PAYLOAD_INLINE_MAX_BYTES="20000"
    )
    assert process.stdout is not None and process.stderr is not None
    lines: list[str] = []
    reader = asyncio.create_task(read_lines(process.stdout, lines))
    errors = asyncio.create_task(process.stderr.read())
    try:
        for i in range(6):
            await send(stack, command(f"c-{i}", "matter-gap"))
        await send(stack, command("c-big", "matter-big", "clause text " * 3_000))
        for body in ("{not json", '{"type": "converse"}', command("c-blank", "m", "  ")):
            await send(stack, body)
        await stack.drain("MODEL_QUEUE_URL", expect=7)
        await send(stack, command("c-0", "matter-gap"))  # served before: a duplicate
        dead = await stack.drain(await stack.dead_letter_url(), expect=3)
        await stack.until_empty("CONVERSE_QUEUE_URL")
        # An interval's document is out before the stop: the sum runs over both kinds.
        async with asyncio.timeout(60):
            while not any('"_aws"' in line for line in lines):
                await asyncio.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.wait()
            await reader
    finally:
        if process.returncode is None:
            process.kill()
    assert process.returncode == 0, (await errors).decode()
    assert len(dead) == 3
    output = "".join(lines)
    docs = emf.documents(output.splitlines())  # each checked against the specification
    main = [d for d in docs if m.REASON_DIMENSION not in d]
    assert len(main) >= 2  # an interval or more, and the flush at stop
    total = emf.totals(main)
    assert {name: total[name] for name in m.COUNTERS} == {
        m.COMMANDS_SERVED: 7,
        m.COMMANDS_REJECTED: 3,
        m.COMMANDS_FAILED: 0,
        m.COMMANDS_RETRIED: 0,
        m.DUPLICATES_SKIPPED: 1,
        m.FOLD_GAP_MESSAGES: 6 * 16,
        m.FOLD_REQUESTS_SENT: 1,
        m.PAYLOADS_OFFLOADED: 1,
        m.LIVENESS_FAILURES: 0,
        m.DEPENDENCY_FAILING: 0,
        m.DEPENDENCY_RECOVERED: 0,
        m.BREAKERS_OPEN: 0,
        m.TURNS_HELD: 0,
        m.CACHE_CHECKS: 0,  # no answer here carries the model's bill
    }
    by_kind = emf.totals([d for d in docs if m.REASON_DIMENSION in d], by=m.REASON_DIMENSION)
    assert by_kind == {
        (m.COMMANDS_REJECTED, "invalid_json"): 1,
        (m.COMMANDS_REJECTED, "invalid_command"): 1,
        (m.COMMANDS_REJECTED, "blank_message"): 1,
    }
    assert len(emf.samples(main, m.TURN_LATENCY)) == 7
    assert all(v > 0 for v in emf.samples(main, m.TURN_LATENCY))
    assert len(emf.samples(main, m.AGE_AT_RECEIVE)) == 11  # every message received
    assert sorted(emf.samples(main, m.WINDOW_KEPT)) == [4] + [24] * 6
    assert sorted(emf.samples(main, m.WINDOW_DROPPED)) == [0] + [16] * 6
    for document in docs:
        assert document["_aws"]["CloudWatchMetrics"][0]["Namespace"] == m.NAMESPACE
        assert document[m.SERVICE_DIMENSION] == m.SERVICE
        assert document[m.QUEUE_DIMENSION] == "mira-converse"
    emf_lines = [line for line in output.splitlines() if '"_aws"' in line]
    assert not any(s in line for line in emf_lines for s in ("matter-", "c-", "clause", SECRET))


async def read_lines(stream: asyncio.StreamReader, lines: list[str]) -> None:
    """Collect a process's output as it comes (its pipe never fills)."""
    while line := await stream.readline():
        lines.append(line.decode())


# -- traces ------------------------------------------------------------------------------------


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def header_fields(message: dict[str, Any]) -> dict[str, str]:
    header = message["Attributes"]["AWSTraceHeader"]
    return dict(part.split("=", 1) for part in header.split(";"))


async def test_a_turn_is_one_span_in_the_inbound_trace_and_its_sends_carry_it_on(
    stack: Stack, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """GIVEN an OpenTelemetry SDK with an in-memory exporter, WHEN a command arrives with an
    AWSTraceHeader and another without, THEN each turn is one span; the first is a child of
    the header's Parent in its Root, its prompt (sent in a batch) and its fold request carry
    that Root with the turn's span as Parent, and each of its log lines the trace id."""
    provider, exporter = spans
    await stack.seed("matter-t", exchanges(20), folded_through=0)
    await stack.seed("matter-u", exchanges(2))
    await send(stack, command("c-traced", "matter-t"), trace_header=INBOUND)
    await send(stack, command("c-untraced", "matter-u"))
    with captured_logs() as logs:
        async with running_worker(stack.settings(), tracer_provider=provider):
            prompts = await stack.drain("MODEL_QUEUE_URL", expect=2)
            [fold] = await stack.drain("COMPACTION_QUEUE_URL", expect=1)
    turns = [s for s in exporter.get_finished_spans() if s.name == "mira-converse process"]
    assert len(turns) == 2
    by_command = {s.attributes["converse.command_id"]: s for s in turns if s.attributes}
    traced, untraced = by_command["c-traced"], by_command["c-untraced"]
    assert traced.parent is not None and f"{traced.parent.span_id:016x}" == PARENT
    assert f"{traced.context.trace_id:032x}" == ROOT[2:].replace("-", "")
    assert untraced.parent is None  # no header: a trace of its own
    prompt_of = {body_of(p)["command_id"]: p for p in prompts}
    for message in (prompt_of["c-traced"], fold):
        assert header_fields(message) == {
            "Root": ROOT,
            "Parent": f"{traced.context.span_id:016x}",
            "Sampled": "1",
        }
    assert header_fields(prompt_of["c-untraced"])["Root"] != ROOT
    turn_lines = [e for e in logs if e.get("command_id") == "c-traced"]
    assert turn_lines and all(e["trace_id"] == ROOT for e in turn_lines)
    for span in turns:
        assert SECRET not in json.dumps(dict(span.attributes or {}))


# -- liveness ----------------------------------------------------------------------------------


def health(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WORKER, "health", "--file", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


async def wait_for(predicate: Callable[[], bool], within: float) -> None:
    async with asyncio.timeout(within):
        while not predicate():
            await asyncio.sleep(0.1)


async def test_an_idle_worker_passes_its_liveness_probe_and_a_stopped_one_fails(
    stack: Stack, tmp_path: Path
) -> None:
    path = tmp_path / "health"
    process = await asyncio.create_subprocess_exec(
        *WORKER,
        "run",
        env=stack.process_env(HEALTH_FILE=str(path), HEALTH_MAX_SILENCE_SECONDS="4"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        # Failing while it starts (checking its resources), passing once it runs.
        await wait_for(lambda: check(path, time.time())[0], within=60)
        await asyncio.sleep(5)  # longer than the bound, on an empty queue
        idle = await asyncio.to_thread(health, path)
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
    assert (idle.returncode, idle.stdout.split(":")[0]) == (0, "healthy"), idle.stderr
    stopped = await asyncio.to_thread(health, path)
    assert stopped.returncode == 1
    assert stopped.stderr.startswith("unhealthy: no health file at ")


async def test_a_wedged_receive_loop_fails_the_probe_within_its_bound(
    stack: Stack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    reliability_report: dict[str, Any],
) -> None:
    """GIVEN a worker whose receive never returns (a black-holed connection, injected),
    THEN `worker health` passes at first and fails once the loop has been silent for
    HEALTH_MAX_SILENCE_SECONDS (4 s), not much later: the first probe that fails reports a
    silence between the bound and the bound plus the time since the last passing probe
    began (a probe's own start-up, however slow, is inside that span, not added to it).
    That it passed at first is the probe's own check, run in this process at once."""
    path = tmp_path / "health"
    wedged_at: list[float] = []
    unpatched = SqsQueue.receive

    async def receive(self: SqsQueue, *args: Any, **kwargs: Any) -> Any:
        if self.url != stack.env["CONVERSE_QUEUE_URL"]:
            return await unpatched(self, *args, **kwargs)
        wedged_at.append(time.monotonic())
        await asyncio.Event().wait()
        return None

    monkeypatch.setattr(SqsQueue, "receive", receive)
    settings = stack.settings(health_file=str(path), health_max_silence_seconds=4)
    probes: list[tuple[float, float, subprocess.CompletedProcess[str]]] = []
    async with running_worker(settings):
        # Wedged, and the file written since the worker began to run (it fails while starting).
        await wait_for(lambda: bool(wedged_at) and check(path, time.time())[0], within=30)
        # The probe's own judgement, at once: no process start-up between the wedge and it.
        first_checked_at = time.monotonic()
        first = check(path, time.time())
        async with asyncio.timeout(60):  # 15x the bound: a probe that never fails fails here
            while not probes or probes[-1][2].returncode == 0:
                launched = time.monotonic()
                probe = await asyncio.to_thread(health, path)
                probes.append((launched, time.monotonic(), probe))
                await asyncio.sleep(0.2)
    assert first[0], first[1]  # the probe passed at first
    *passing, (_, failed_at, failing) = probes
    reported = re.fullmatch(
        r"unhealthy: the receive loop has been silent for (\d+) s \(bound 4 s\)\n",
        failing.stderr,
    )
    assert reported, failing.stderr
    last_pass = max([first_checked_at] + [launched for launched, _, _ in passing])
    assert 4 <= int(reported[1]) <= 4 + (failed_at - last_pass) + 0.5  # :.0f rounds
    reliability_report["worker health after a wedged receive (bound 4 s)"] = {
        "failed_after_seconds": round(failed_at - wedged_at[0], 2)
    }
