"""``worker health``: the liveness probe (the ECS health check, the Kubernetes
``livenessProbe``). It reads only the health file, so it needs none of the settings and
imports next to nothing: it runs every 30 s on the worker's CPU."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

EXIT_UNHEALTHY = 1


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    health = commands.add_parser(
        "health", help="exit 0 if a running worker's loops beat within their bounds (probe)"
    )
    health.add_argument("--file", help="the health file (default: HEALTH_FILE, or its default)")
    health.set_defaults(execute=run_health)


def run_health(args: argparse.Namespace) -> int:
    from worker.telemetry.probe import DEFAULT_HEALTH_FILE, check

    healthy, line = check(
        Path(args.file or os.environ.get("HEALTH_FILE") or DEFAULT_HEALTH_FILE), time.time()
    )
    print(line, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else EXIT_UNHEALTHY
