"""S3: the payload bucket, for bodies too big to travel inline."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from worker.adapters.errors import aws_call, error_code
from worker.errors import ObjectMissing

_MISSING = frozenset({"NoSuchKey", "NoSuchBucket", "404"})


class S3ObjectStore:
    """Implements ObjectStore."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def put(self, bucket: str, key: str, data: bytes) -> None:
        with aws_call("s3.PutObject"):
            await self._client.put_object(
                Bucket=bucket,
                Key=key,
                Body=data,
                ContentType="application/json",
                ServerSideEncryption="AES256",
            )

    async def get(self, bucket: str, key: str) -> bytes:
        """The object's bytes; :class:`ObjectMissing` if it is not there. Every other
        failure, of the call or of reading the body, is a :class:`StoreUnavailable`."""
        with aws_call("s3.GetObject"):
            try:
                response = await self._client.get_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if error_code(exc) in _MISSING:
                    raise ObjectMissing(f"s3://{bucket}/{key}") from exc
                raise
            async with response["Body"] as stream:
                data: bytes = await stream.read()
        return data
