"""The stop arithmetic of docs/RELIABILITY.md, from the worker's own code, for the platforms'
kill timeouts (ECS ``StopTimeout``, Kubernetes ``terminationGracePeriodSeconds``, compose
``stop_grace_period``)."""

from __future__ import annotations

from collections.abc import Mapping

from worker.bootstrap import CONVERSE_VISIBILITY_TIMEOUT
from worker.settings import Settings

STOP_KNOBS = ("SHUTDOWN_GRACE_SECONDS", "RECEIVE_WAIT_SECONDS")


def kill_after_seconds(env: Mapping[str, object]) -> int:
    """The shortest kill timeout a worker with this environment's stop knobs needs: its
    poll and its in-flight work waited for, then the final calls (worker.policy)."""
    knobs = {name.lower(): env[name] for name in STOP_KNOBS if name in env}
    settings = Settings(
        converse_queue_url="https://sqs.example/1/converse",
        model_queue_url="https://sqs.example/1/model",
        compaction_queue_url="https://sqs.example/1/compaction",
        history_table="history",
        **knobs,
    )
    policy = settings.consumer_policy(visibility_timeout=CONVERSE_VISIBILITY_TIMEOUT)
    return policy.kill_after_seconds
