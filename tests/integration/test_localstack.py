"""The worker against a second, independent SQS and S3: LocalStack's, run on the host.

`make localstack-host` installs localstack-core 4.7.0 into .localstack/venv (CI does);
without it the tests are skipped and say so. Its DynamoDB would need a
download at start-up, so the history table stays on moto (AWS_ENDPOINT_URL_DYNAMODB).
Everything listens on 127.0.0.1: LocalStack only honours GATEWAY_LISTEN with hypercorn.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import CREDENTIALS, Stack, body_of, exchanges, running_worker
from worker.bootstrap import Resources, create_resources
from worker.payloads import SIZE_ATTRIBUTE, pointer_body
from worker.runtime import aws_clients

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOCALSTACK_PYTHON = ROOT / ".localstack" / "venv" / "bin" / "python"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def localstack_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not LOCALSTACK_PYTHON.exists():
        pytest.skip("LocalStack on the host is not installed: run `make localstack-host`")
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
        deadline = time.monotonic() + 60
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
