"""The compose file's init step (its `bootstrap` service) creates on a moto server exactly
the resources `worker bootstrap`'s own code creates: one definition, not a second list."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from worker.app.resources import (
    DEAD_LETTER_RETENTION_SECONDS,
    SOURCE_RETENTION_SECONDS,
    TTL_ATTRIBUTE,
    Resources,
    create_resources,
)
from worker.app.runtime import aws_clients

pytestmark = pytest.mark.integration

COMPOSE = Path(__file__).resolve().parents[2] / "localstack.yml"


def reset(endpoint: str) -> None:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    urllib.request.urlopen(request).close()


def snapshot(endpoint: str) -> dict[str, Any]:
    """Every queue, table and bucket on the server, with the attributes the stage relies on."""
    args: dict[str, Any] = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    sqs, dynamodb, s3 = (boto3.client(s, **args) for s in ("sqs", "dynamodb", "s3"))
    queues = {}
    for url in sqs.list_queues().get("QueueUrls", []):
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        redrive = json.loads(attributes.get("RedrivePolicy", "null") or "null")
        queues[url.rsplit("/", 1)[-1]] = {
            "VisibilityTimeout": attributes["VisibilityTimeout"],
            "MessageRetentionPeriod": attributes["MessageRetentionPeriod"],
            "SqsManagedSseEnabled": attributes.get("SqsManagedSseEnabled"),
            "FifoQueue": attributes.get("FifoQueue", "false"),
            "RedriveTo": redrive and redrive["deadLetterTargetArn"].rsplit(":", 1)[-1],
            "MaxReceiveCount": redrive and int(redrive["maxReceiveCount"]),
        }
    tables = {}
    for name in dynamodb.list_tables()["TableNames"]:
        table = dynamodb.describe_table(TableName=name)["Table"]
        ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        tables[name] = {
            "KeySchema": table["KeySchema"],
            "Billing": table.get("BillingModeSummary", {}).get("BillingMode"),
            "TTL": ttl.get("AttributeName"),
        }
    buckets = sorted(b["Name"] for b in s3.list_buckets().get("Buckets", []))
    return {"queues": queues, "tables": tables, "buckets": buckets}


def run_compose_init(endpoint: str) -> str:
    """Run the compose `bootstrap` service's command with its environment, but on moto."""
    service = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]["bootstrap"]
    env = {str(k): str(v) for k, v in service["environment"].items()}
    assert env.pop("AWS_ENDPOINT_URL") == "http://localstack:4566"
    env["AWS_ENDPOINT_URL"] = endpoint
    result = subprocess.run(
        [sys.executable, "-m", "worker.cli", *service["command"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def test_the_compose_init_creates_what_worker_bootstrap_creates(moto_endpoint: str) -> None:
    reset(moto_endpoint)
    printed = run_compose_init(moto_endpoint)
    from_compose = snapshot(moto_endpoint)

    reset(moto_endpoint)

    async def bootstrap() -> None:
        async with aws_clients() as clients:
            await create_resources(
                clients.sqs, clients.dynamodb, clients.s3, Resources(), region="us-east-1"
            )

    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", moto_endpoint)
        asyncio.run(bootstrap())
    from_bootstrap = snapshot(moto_endpoint)

    assert from_compose == from_bootstrap
    assert set(from_compose["queues"]) == {
        "mira-converse",
        "mira-converse-dlq",
        "mira-model",
        "mira-model-dlq",
        "mira-compaction",
        "mira-compaction-dlq",
    }
    assert from_compose["queues"]["mira-converse"]["RedriveTo"] == "mira-converse-dlq"
    retention = {name: q["MessageRetentionPeriod"] for name, q in from_compose["queues"].items()}
    assert retention == {
        name: str(
            DEAD_LETTER_RETENTION_SECONDS if name.endswith("-dlq") else SOURCE_RETENTION_SECONDS
        )
        for name in retention
    }
    # The ledger's command records expire; the history table is the writer's, made here
    # with its key schema alone.
    assert set(from_compose["tables"]) == {"mira-history", "mira-ledger"}
    assert from_compose["tables"]["mira-ledger"]["TTL"] == TTL_ATTRIBUTE
    assert from_compose["tables"]["mira-history"]["TTL"] is None
    assert from_compose["buckets"] == ["mira-payloads"]
    assert "CONVERSE_QUEUE_URL=" in printed
