"""S3: the payload bucket, for bodies too big to travel inline."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

import aiohttp
from botocore.exceptions import BotoCoreError, ClientError

from worker.adapters.client_errors import aws_call, error_code, http_status
from worker.errors import ObjectAccessDenied, ObjectKeyRefused, ObjectMissing, ObjectTooLarge

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_s3 import S3Client

_MISSING = frozenset({"NoSuchKey", "NoSuchBucket", "404"})
#: A KMS key as S3 names it: an ARN, or a bare key id.
_KMS_KEY = re.compile(r"(arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/)?[A-Za-z0-9-]{1,128}", re.ASCII)


class S3ObjectStore:
    """Implements ObjectStore. Objects are written with no encryption parameter of their
    own: the bucket's default encryption applies (SSE-S3, or the stack's customer managed
    key when one is given), as a request's own setting would override it."""

    def __init__(self, client: S3Client) -> None:
        self._client = client

    async def put(self, bucket: str, key: str, data: bytes) -> None:
        with aws_call("s3.PutObject"):
            await self._client.put_object(
                Bucket=bucket,
                Key=key,
                Body=data,
                ContentType="application/json",
            )

    async def get(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        """The object's bytes, at most ``max_bytes`` of them.

        :class:`ObjectMissing` if it is not there (404); :class:`ObjectTooLarge` if its
        ``ContentLength`` is over the bound (no byte of the body is read: the connection is
        dropped) or if the body turns out longer than the bound anyway (at most
        ``max_bytes + 1`` bytes are read to find out); :class:`ObjectKeyRefused` on a 403 for
        an object S3 shows under a KMS key (the key is what the role may not use);
        :class:`ObjectAccessDenied` on any other 403.
        Every other failure, of the call or of reading the body, is a
        :class:`~worker.errors.StoreUnavailable`.
        """
        operation = "s3.GetObject"
        with aws_call(operation):
            try:
                response = await self._client.get_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                code = error_code(exc)
                if code in _MISSING:
                    raise ObjectMissing(f"s3://{bucket}/{key}") from exc
                if http_status(exc) == 403:
                    if (key_id := await self._refused_key(bucket, key)) is not None:
                        raise ObjectKeyRefused(key_id) from exc
                    raise ObjectAccessDenied(
                        f"{operation} failed: {code} (HTTP 403)", bucket=bucket, code=code
                    ) from exc
                raise
            # Read through the StreamingBody itself: ``async with`` yields aiohttp's response,
            # whose ``read()`` takes no bound. Leaving the block releases the connection
            # (closed, not pooled, when the body was not read to its end).
            body = response["Body"]
            async with body:
                declared = response.get("ContentLength")
                if isinstance(declared, int) and declared > max_bytes:
                    raise ObjectTooLarge(max_bytes)
                data = await read_at_most(body, max_bytes + 1)
        if len(data) > max_bytes:
            raise ObjectTooLarge(max_bytes)
        return data

    async def _refused_key(self, bucket: str, key: str) -> str | None:
        """After a GetObject answered 403: the KMS key the object is encrypted under, when S3
        shows the object's metadata (HeadObject needs no kms:Decrypt), so the key is what the
        read was refused for; None when it is not so (the 403 is the role's or the bucket's)."""
        try:
            head = await self._client.head_object(Bucket=bucket, Key=key)
        except (ClientError, BotoCoreError, aiohttp.ClientError, OSError):
            return None
        if not str(head.get("ServerSideEncryption", "")).startswith("aws:kms"):
            return None
        key_id = str(head.get("SSEKMSKeyId", ""))
        return key_id if _KMS_KEY.fullmatch(key_id) else "(a key S3 does not name)"


class Readable(Protocol):
    """What :func:`read_at_most` reads: aiobotocore's StreamingBody, or a test's stream."""

    async def read(self, amt: int | None = ..., /) -> bytes: ...


async def read_at_most(stream: Readable, limit: int) -> bytes:
    """Read ``stream`` to its end or until ``limit`` bytes, whichever comes first: a read
    returns what has arrived, up to what it was asked for, so it loops."""
    data = bytearray()
    while len(data) < limit:
        chunk = await stream.read(limit - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)
