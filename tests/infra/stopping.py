"""The stop arithmetic of docs/RELIABILITY.md, from the worker's own code, for the platforms'
kill timeouts (ECS ``StopTimeout``, Kubernetes ``terminationGracePeriodSeconds``, compose
``stop_grace_period``)."""

from __future__ import annotations

from collections.abc import Mapping

from tests.conftest import settings
from worker.app.resources import CONVERSE_VISIBILITY_TIMEOUT

STOP_KNOBS = ("SHUTDOWN_GRACE_SECONDS", "RECEIVE_WAIT_SECONDS")


def kill_after_seconds(env: Mapping[str, object]) -> int:
    """The shortest kill timeout a worker with this environment's stop knobs needs: its
    poll and its in-flight work waited for, then the final calls (worker.consumer.pacing)."""
    knobs = {name.lower(): env[name] for name in STOP_KNOBS if name in env}
    policy = settings(**knobs).consumer_policy(visibility_timeout=CONVERSE_VISIBILITY_TIMEOUT)
    return policy.kill_after_seconds
