"""``worker window`` against the moto server: the report's shape, no content unless asked,
and nothing sent or written (every queue and the whole table as they were)."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

import pytest

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from tests.integration.conftest import Stack, running_worker

pytestmark = pytest.mark.integration

SECRET = "PRIVILEGED"
QUEUES = ("CONVERSE_QUEUE_URL", "MODEL_QUEUE_URL", "COMPACTION_QUEUE_URL")
ROW = re.compile(r"^\s+\d+  (user|assistant)\s+\d+(  yes \([\d,]+ stored\))?$")


async def window_command(stack: Stack, *args: str, **env: str) -> str:
    return await stack.cli_output("window", *args, **env)


async def everything(stack: Stack) -> tuple[list[dict[str, Any]], list[str]]:
    """The whole table and every queue's depth, to compare before and after."""
    items = (await stack.clients.dynamodb.scan(TableName=stack.env["HISTORY_TABLE"]))["Items"]
    depths = []
    for name in QUEUES:
        attributes = await stack.clients.sqs.get_queue_attributes(
            QueueUrl=stack.env[name], AttributeNames=["All"]
        )
        depths.append(
            attributes["Attributes"]["ApproximateNumberOfMessages"]
            + "/"
            + attributes["Attributes"]["ApproximateNumberOfMessagesNotVisible"]
        )
    return sorted(items, key=lambda i: i["sk"]["S"]), depths


async def test_the_report_of_a_served_conversation_reads_only_and_shows_no_content(
    stack: Stack,
) -> None:
    """GIVEN a conversation one cache-aligned turn has served (its anchor stored) and one
    more exchange appended, WHEN an operator runs `worker window`, THEN the report has
    every line it promises, no message or summary text, and the table and the queues are
    exactly as they were."""
    exchanges = [
        (role, f"{SECRET} {role} {i} " + "clause " * 60)
        for i in range(15)
        for role in ("user", "assistant")
    ]
    await stack.seed("matter-w1", exchanges, folded_through=20, summary=f"{SECRET} summary")
    await stack.send_command(command_id="c-1", conversation_id="matter-w1")
    async with running_worker(
        stack.settings(history_window_mode="cache-aligned", model_id=STAND_IN_MODEL_ID)
    ):
        await stack.drain("MODEL_QUEUE_URL", expect=1)
        async with asyncio.timeout(60):  # the anchor is written after the prompt: wait for it
            while "window_anchor" not in await stack.state_item("matter-w1"):
                await asyncio.sleep(0.05)
    await stack.seed(
        "matter-w1", [("user", f"{SECRET} q"), ("assistant", f"{SECRET} a")], first_seq=31
    )
    before = await everything(stack)

    output = await window_command(
        stack, "--conversation", "matter-w1", "--mode", "cache-aligned", MODEL_ID=STAND_IN_MODEL_ID
    )
    lines = output.splitlines()
    assert SECRET not in output and "clause" not in output
    assert lines[0].startswith("conversation matter-w1: the next turn")
    assert lines[1].startswith("history: newest seq 32; fold mark 20 (summary ")
    assert lines[2] == "mode: cache-aligned (headroom 1500 tokens, 8 messages)"
    assert re.fullmatch(
        r"anchor: stored seq \d+ \(fold mark 20\); this turn would keep it \(writes nothing\)",
        lines[3],
    )
    assert lines[4] == "summary shown: fold mark 20; the newest; snapshot stored with the anchor"
    # The TTLs the next turn would choose if asked now (the wall clock ends the newest gap).
    assert lines[5].startswith("cache lifetimes: ")
    assert re.fullmatch(r"window: \d+ kept, seq \d+-32; [\d,]+ estimated tokens .*", lines[6])
    assert lines[7].startswith("dropped: ")
    assert lines[8] == "fold gap: none"
    assert lines[9] == "left out of the view: none"
    assert lines[10].split() == ["seq", "role", "tokens", "trimmed"]
    rows = lines[11:-1]
    assert rows and all(ROW.match(row) for row in rows)
    assert rows[-1].split()[:2] == ["32", "assistant"]
    assert re.fullmatch(
        r"cache model \(.*\): read [\d,]+, written [\d,]+, uncached [\d,]+ tokens; billed "
        r"[\d,]+ input-token units \([\d,]+ without a cache\)",
        lines[-1],
    )
    read = re.search(r"read ([\d,]+),", lines[-1])
    assert read is not None and int(read.group(1).replace(",", "")) > 0  # the prefix is cached

    sliding = await window_command(stack, "--conversation", "matter-w1", "--mode", "sliding")
    assert "anchor:" not in sliding and "mode: sliding" in sliding and SECRET not in sliding
    shown = await window_command(stack, "--conversation", "matter-w1", "--show-content")
    assert f"        | {SECRET} q" in shown and f"        | {SECRET} summary" in shown
    assert "mode: sliding" in shown  # HISTORY_WINDOW_MODE's default

    assert await everything(stack) == before  # nothing written, nothing sent


async def test_the_mode_comes_from_the_settings_and_a_bad_one_is_refused(stack: Stack) -> None:
    await stack.seed("matter-w2", [("user", "q"), ("assistant", "a")])
    output = await window_command(
        stack,
        "--conversation",
        "matter-w2",
        HISTORY_WINDOW_MODE="cache-aligned",
        MODEL_ID=STAND_IN_MODEL_ID,
    )
    assert "anchor: none stored; this turn would re-anchor (first_turn) at seq 1" in output
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "worker.cli",
        "window",
        "--conversation",
        "matter-w2",
        env=stack.process_env(
            HISTORY_WINDOW_MODE="cache-aligned",
            MODEL_ID=STAND_IN_MODEL_ID,
            HISTORY_WINDOW_ANCHOR_HEADROOM_MESSAGES="25",
        ),
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        _, stderr = await process.communicate()
    assert process.returncode == 2
    assert "HISTORY_WINDOW_ANCHOR_HEADROOM_MESSAGES (25) must be below" in stderr.decode()
