"""The S3 adapter against a fake client: every failure of GetObject is translated at the
boundary, so no botocore or aiohttp exception reaches the stage, and no read goes past the
bound it is given."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError

from worker.adapters.s3 import S3ObjectStore
from worker.errors import (
    ObjectAccessDenied,
    ObjectKeyRefused,
    ObjectMissing,
    ObjectTooLarge,
    RetryableError,
    StoreUnavailable,
)

BOUND = 100


def client_error(code: str, status: int) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "quoting the PRIVILEGED request"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "GetObject")


class Body:
    """A streaming body that hands out at most ``chunk`` bytes a read, as a socket does,
    and counts the bytes it gave."""

    def __init__(self, data: bytes, error: BaseException | None, chunk: int = 7) -> None:
        self._data = data
        self._error = error
        self._chunk = chunk
        self.given = 0
        self.reads: list[int | None] = []

    async def __aenter__(self) -> object:
        # As aiobotocore's StreamingBody: the block gets the aiohttp response, whose read()
        # takes no bound, so the adapter must read through the body itself.
        return object()

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self, amt: int | None = None) -> bytes:
        self.reads.append(amt)
        if self._error is not None:
            raise self._error
        take = len(self._data) - self.given if amt is None else min(amt, self._chunk)
        piece = self._data[self.given : self.given + take]
        self.given += len(piece)
        return piece


class FakeS3:
    def __init__(
        self,
        data: bytes = b"{}",
        *,
        content_length: int | None = -1,  # -1: the true length; None: no header
        call_error: BaseException | None = None,
        read_error: BaseException | None = None,
        head: dict[str, Any] | None = None,
    ) -> None:
        self._call_error = call_error
        #: HeadObject's answer; None: it fails as GetObject did (the role may not read it).
        self._head = head
        self.body = Body(data, read_error)
        self._length = len(data) if content_length == -1 else content_length

    async def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        if self._call_error is not None:
            raise self._call_error
        response: dict[str, Any] = {"Body": self.body}
        if self._length is not None:
            response["ContentLength"] = self._length
        return response

    async def head_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        if self._head is None:
            raise self._call_error or client_error("403", 403)
        return self._head


async def test_an_object_is_read_whole_across_partial_reads() -> None:
    data = bytes(range(BOUND))
    s3 = FakeS3(data)
    assert await S3ObjectStore(s3).get("bucket", "key", max_bytes=BOUND) == data
    assert None not in s3.body.reads  # never "read everything"


async def test_an_object_of_exactly_the_bound_is_read() -> None:
    data = b"x" * BOUND
    assert await S3ObjectStore(FakeS3(data)).get("bucket", "key", max_bytes=BOUND) == data


async def test_an_object_whose_content_length_is_over_the_bound_is_refused_before_any_read() -> (
    None
):
    s3 = FakeS3(b"x" * (BOUND + 1))
    with pytest.raises(ObjectTooLarge) as caught:
        await S3ObjectStore(s3).get("bucket", "key", max_bytes=BOUND)
    assert caught.value.max_bytes == BOUND
    assert s3.body.reads == []
    assert s3.body.given == 0


@pytest.mark.parametrize(
    "declared", [None, 10, BOUND], ids=["no-content-length", "lies-small", "lies-at-bound"]
)
async def test_a_body_longer_than_its_content_length_says_is_read_only_one_byte_past_the_bound(
    declared: int | None,
) -> None:
    """ContentLength is not trusted alone: a body that runs on is cut at the bound + 1."""
    s3 = FakeS3(b"x" * (BOUND * 50), content_length=declared)
    with pytest.raises(ObjectTooLarge):
        await S3ObjectStore(s3).get("bucket", "key", max_bytes=BOUND)
    assert s3.body.given == BOUND + 1


@pytest.mark.parametrize("code", ["NoSuchKey", "NoSuchBucket", "404"])
async def test_a_missing_object_is_object_missing(code: str) -> None:
    with pytest.raises(ObjectMissing, match=r"s3://bucket/key"):
        await S3ObjectStore(FakeS3(call_error=client_error(code, 404))).get(
            "bucket", "key", max_bytes=BOUND
        )


@pytest.mark.parametrize("code", ["AccessDenied", "AllAccessDisabled", "403"])
async def test_a_403_is_access_denied_naming_bucket_and_code_and_stays_retryable(
    code: str,
) -> None:
    """A 403 is a policy to fix (or, on a role without s3:ListBucket, a missing key): it is
    a StoreUnavailable, so the command is retried and a fixed policy recovers it."""
    store = S3ObjectStore(FakeS3(call_error=client_error(code, 403)))
    with pytest.raises(ObjectAccessDenied) as caught:
        await store.get("mira-payloads", "key", max_bytes=BOUND)
    assert isinstance(caught.value, StoreUnavailable)
    assert (caught.value.bucket, caught.value.code) == ("mira-payloads", code)
    assert str(caught.value) == f"s3.GetObject failed: {code} (HTTP 403)"
    assert "PRIVILEGED" not in str(caught.value)


KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


async def test_a_403_on_an_object_s3_shows_under_a_kms_key_is_that_key_refused() -> None:
    """GIVEN GetObject answers 403 and HeadObject (which needs s3:GetObject, not kms:Decrypt)
    shows the object under a KMS key, THEN the key is what the role may not use: the error
    names it, and is no retryable error (the same key refuses every try)."""
    head = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": KEY_ARN}
    store = S3ObjectStore(FakeS3(call_error=client_error("AccessDenied", 403), head=head))
    with pytest.raises(ObjectKeyRefused) as caught:
        await store.get("mira-payloads", "key", max_bytes=BOUND)
    assert caught.value.key_id == KEY_ARN
    assert not isinstance(caught.value, RetryableError)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ({"ServerSideEncryption": "AES256"}, ObjectAccessDenied),
        ({}, ObjectAccessDenied),
        ({"ServerSideEncryption": "aws:kms:dsse", "SSEKMSKeyId": "x" * 500}, ObjectKeyRefused),
    ],
    ids=["SSE-S3: the 403 is the policy's", "no encryption shown", "a key S3 spells oddly"],
)
async def test_a_403_is_the_keys_only_when_s3_shows_a_kms_key(
    head: dict[str, Any], expected: type[Exception]
) -> None:
    store = S3ObjectStore(FakeS3(call_error=client_error("AccessDenied", 403), head=head))
    with pytest.raises(expected) as caught:
        await store.get("mira-payloads", "key", max_bytes=BOUND)
    if isinstance(caught.value, ObjectKeyRefused):
        assert caught.value.key_id == "(a key S3 does not name)"


@pytest.mark.parametrize(
    ("call_error", "read_error", "message"),
    [
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
    ids=["throttled", "connect-timeout", "disconnected", "timeout", "read-timeout", "cut-body"],
)
async def test_every_other_failure_of_the_call_or_the_read_is_store_unavailable(
    call_error: BaseException | None, read_error: BaseException | None, message: str
) -> None:
    store = S3ObjectStore(FakeS3(call_error=call_error, read_error=read_error))
    with pytest.raises(StoreUnavailable) as caught:
        await store.get("bucket", "key", max_bytes=BOUND)
    assert not isinstance(caught.value, ObjectAccessDenied)
    assert str(caught.value) == message
    assert "PRIVILEGED" not in str(caught.value)
