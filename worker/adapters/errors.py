"""Botocore failures become :class:`StoreUnavailable` at the adapter boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from botocore.exceptions import BotoCoreError, ClientError

from worker.errors import StoreUnavailable


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
    the backstop. The message names the operation and the code, never AWS's own text, which
    can quote request values.
    """
    try:
        yield
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
        raise StoreUnavailable(f"{operation} failed: {error_code(exc)} (HTTP {status})") from exc
    except BotoCoreError as exc:
        raise StoreUnavailable(f"{operation} failed: {type(exc).__name__}") from exc
    except (aiohttp.ClientError, OSError) as exc:  # a dropped connection aiobotocore let through
        raise StoreUnavailable(f"{operation} failed: {type(exc).__name__}") from exc
