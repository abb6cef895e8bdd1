"""Where local AWS listens and how a client reaches it: loopback, free ports, credentials.

Every server here binds 127.0.0.1 only. moto, dynalite and LocalStack accept any
credentials, but botocore insists on some, and on a region.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable

HOST = "127.0.0.1"
REGION = "us-east-1"

#: The AWS variables of a process pointed at local AWS (with ``AWS_ENDPOINT_URL``).
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}

#: The same, as keyword arguments of ``boto3.client``.
DUMMY_CLIENT_ARGS: dict[str, str] = {
    "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
    "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    "region_name": REGION,
}


def free_port(host: str = HOST) -> int:
    """A port nothing listens on right now (the usual small race applies)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def aws_environ(endpoint: str, *, dynamodb: str | None = None) -> dict[str, str]:
    """The AWS variables of a process pointed at ``endpoint`` (SQS, S3 and DynamoDB), or
    with DynamoDB at ``dynamodb`` instead (botocore's service-specific endpoint variable)."""
    env = dict(CREDENTIALS, AWS_ENDPOINT_URL=endpoint)
    if dynamodb is not None and dynamodb != endpoint:
        env["AWS_ENDPOINT_URL_DYNAMODB"] = dynamodb
    return env


def wait_until_answering(
    url: str,
    process: subprocess.Popen[bytes],
    probe: Callable[[], object],
    *,
    timeout: float,
    name: str,
) -> None:
    """Wait until ``process`` accepts connections at ``url`` and ``probe()`` succeeds (any
    ``Exception`` from it counts as not yet); RuntimeError if it exits or ``timeout`` passes."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    deadline = time.perf_counter() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode} while starting")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                pass
            probe()
        except Exception:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{name} did not answer on {url} in {timeout} s") from None
            time.sleep(0.02)
        else:
            return
