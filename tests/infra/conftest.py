"""Fixtures for the infrastructure tests: a moto server on a free port of 127.0.0.1."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from moto.server import ThreadedMotoServer

from localaws.moto import reset_moto
from tests.infra.cfn_deploy import REGION


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """A fresh moto server for one test module, with dummy credentials in the environment.

    moto keeps its state in the process, not in the server: whatever an earlier test of this
    process created (a worker of ``make test`` may have run any file before this one) is
    forgotten first, so the module deploys onto nothing."""
    werkzeug_log = logging.getLogger("werkzeug")
    previous_level = werkzeug_log.level
    werkzeug_log.setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_ACCESS_KEY_ID", "testing")
            env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            env.setenv("AWS_DEFAULT_REGION", REGION)
            env.setenv("AWS_REGION", REGION)
            for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
                env.delenv(name, raising=False)
            host, port = server.get_host_and_port()
            reset_moto(f"http://{host}:{port}")
            yield f"http://{host}:{port}"
    finally:
        server.stop()
        werkzeug_log.setLevel(previous_level)
