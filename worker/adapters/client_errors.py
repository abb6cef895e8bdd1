"""Botocore failures become :class:`StoreUnavailable` at the adapter boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from botocore.exceptions import BotoCoreError, ClientError

from worker.errors import StoreUnavailable

#: Codes with which AWS says "slow down" (botocore's own list of throttling codes, in part).
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "SlowDown",
    }
)


def failure_kind(code: str, status: object) -> str:
    """How a call that got an answer failed: ``throttled``, ``server`` (5xx) or ``refused``."""
    if code in THROTTLING_CODES:
        return "throttled"
    if isinstance(status, int) and status >= 500:
        return "server"
    return "refused"


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "Unknown"))


def http_status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


@contextmanager
def aws_call(operation: str) -> Iterator[None]:
    """Translate any botocore failure of ``operation`` into a retryable error.

    Every AWS failure is retried: throttling, timeouts and 5xx pass by themselves, and the
    rest (a missing table, a denied action) is an operator's fix, with the redrive policy as
    the backstop. The error names its service (the operation's prefix) and the kind of
    failure, for the consumer's per-dependency health. The message names the operation and
    the code, never AWS's own text, which can quote request values.
    """
    service = operation.split(".", 1)[0]
    try:
        yield
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
        code = error_code(exc)
        raise StoreUnavailable(
            f"{operation} failed: {code} (HTTP {status})",
            service=service,
            kind=failure_kind(code, status),
            operation=operation,
            code=code,
        ) from exc
    # aiohttp's and the OS's errors: a dropped connection aiobotocore let through.
    except (BotoCoreError, aiohttp.ClientError, OSError) as exc:
        raise StoreUnavailable(
            f"{operation} failed: {type(exc).__name__}",
            service=service,
            kind="connection",
            operation=operation,
        ) from exc
