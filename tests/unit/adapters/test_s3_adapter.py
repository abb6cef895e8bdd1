"""The S3 adapter against a fake client: every failure of GetObject is translated at the
boundary, so no botocore or aiohttp exception reaches the stage."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError

from worker.adapters.s3 import S3ObjectStore
from worker.errors import ObjectMissing, StoreUnavailable


def client_error(code: str, status: int) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "quoting the PRIVILEGED request"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "GetObject")


class Body:
    def __init__(self, data: bytes, error: BaseException | None) -> None:
        self._data = data
        self._error = error

    async def __aenter__(self) -> Body:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        if self._error is not None:
            raise self._error
        return self._data


class FakeS3:
    def __init__(
        self, *, call_error: BaseException | None = None, read_error: BaseException | None = None
    ) -> None:
        self._call_error = call_error
        self._read_error = read_error

    async def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        if self._call_error is not None:
            raise self._call_error
        return {"Body": Body(b"{}", self._read_error)}


async def test_an_object_is_read() -> None:
    assert await S3ObjectStore(FakeS3()).get("bucket", "key") == b"{}"


@pytest.mark.parametrize("code", ["NoSuchKey", "NoSuchBucket", "404"])
async def test_a_missing_object_is_object_missing(code: str) -> None:
    with pytest.raises(ObjectMissing, match=r"s3://bucket/key"):
        await S3ObjectStore(FakeS3(call_error=client_error(code, 404))).get("bucket", "key")


@pytest.mark.parametrize(
    ("call_error", "read_error", "message"),
    [
        (client_error("AccessDenied", 403), None, "s3.GetObject failed: AccessDenied (HTTP 403)"),
        (client_error("SlowDown", 503), None, "s3.GetObject failed: SlowDown (HTTP 503)"),
        (
            ConnectTimeoutError(endpoint_url="http://s3"),
            None,
            "s3.GetObject failed: ConnectTimeoutError",
        ),
        (aiohttp.ServerDisconnectedError(), None, "s3.GetObject failed: ServerDisconnectedError"),
        (TimeoutError(), None, "s3.GetObject failed: TimeoutError"),
        (None, ReadTimeoutError(endpoint_url="http://s3"), "s3.GetObject failed: ReadTimeoutError"),
        (None, aiohttp.ClientPayloadError("cut"), "s3.GetObject failed: ClientPayloadError"),
    ],
    ids=[
        "denied",
        "throttled",
        "connect-timeout",
        "disconnected",
        "timeout",
        "read-timeout",
        "cut-body",
    ],
)
async def test_every_other_failure_of_the_call_or_the_read_is_store_unavailable(
    call_error: BaseException | None, read_error: BaseException | None, message: str
) -> None:
    store = S3ObjectStore(FakeS3(call_error=call_error, read_error=read_error))
    with pytest.raises(StoreUnavailable) as caught:
        await store.get("bucket", "key")
    assert str(caught.value) == message
    assert "PRIVILEGED" not in str(caught.value)
