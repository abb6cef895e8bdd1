"""The stage's one error tree. Each error decides what happens to the message that raised it.

::

    WorkerError
     ├── ConfigError          the deployment is wrong: the worker refuses to start (exit 2)
     ├── ObjectMissing        a payload pointer names no object (the reader rejects the command)
     ├── ObjectTooLarge       a payload object is over the reader's bound (it rejects the command)
 ├── ObjectKeyRefused     a payload object is under a KMS key the role may not use (rejected)
     ├── RejectedCommand      the command can never be served: to the DLQ with the reason, at once
     └── RetryableError       the command may succeed later: back to the queue, with backoff
          ├── StoreUnavailable       DynamoDB/SQS/S3 throttled, timed out, 5xx or unreachable
          │    └── ObjectAccessDenied    S3 refused a read (HTTP 403): a policy to fix, logged
          └── PayloadTooLarge        a payload above the inline limit and no PAYLOAD_BUCKET

Adapters translate botocore errors at the boundary (``raise … from exc``); no botocore
type leaves them. Anything else that escapes is a defect: the loops log its type and
carry on. Messages never carry message content, summaries or command bodies.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base of every error the stage raises on purpose."""


class ConfigError(WorkerError):
    """The environment or the queue does not describe a valid stage; the message is one line."""


class ObjectMissing(WorkerError):
    """The object a pointer names is not in the bucket (raised by ``ObjectStore.get``)."""


class ObjectTooLarge(WorkerError):
    """The object a pointer names is larger than the reader takes (raised by
    ``ObjectStore.get`` before the body is read, or once the bound is passed while reading)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"the object is over {max_bytes} bytes")
        self.max_bytes = max_bytes


class ObjectKeyRefused(WorkerError):
    """S3 refused a read (HTTP 403) of an object encrypted under a KMS key, and would show the
    object's metadata: the object is there, and it is the key the role may not use. Names the
    key (its id or ARN, as S3 reports it), never the object's content."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"the object is encrypted under a KMS key the role may not use: {key_id}")
        self.key_id = key_id


class RejectedCommand(WorkerError):
    """The command is invalid and will stay invalid: it goes to the dead-letter queue."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RetryableError(WorkerError):
    """A failure that may pass: the message returns to the queue and is tried again."""


class StoreUnavailable(RetryableError):
    """An AWS call failed in a way worth retrying (throttling, timeout, 5xx, connection).

    ``service`` names the AWS service (``dynamodb``, ``sqs``, ``s3``) and ``kind`` how it
    failed (``throttled``, ``server``, ``connection``, ``refused``), when the adapter knows:
    the consumer judges each dependency's health from them (:mod:`worker.consumer.breaker`).
    ``operation`` (``sqs.GetQueueAttributes``) and ``code`` (the service's error code, or the
    HTTP status of an answer without one) say which call failed and how, when it was answered:
    the start-up checks name a refusal by them (:mod:`worker.app.startup`).
    """

    def __init__(
        self,
        message: str,
        *,
        service: str | None = None,
        kind: str | None = None,
        operation: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.service = service
        self.kind = kind
        self.operation = operation
        self.code = code


class ObjectAccessDenied(StoreUnavailable):
    """S3 answered a read with 403: the role or the bucket policy does not allow it (or, on a
    role without ``s3:ListBucket``, the key is missing). Retried, so a fixed policy recovers
    the command; the reader logs it as a configuration fault. Names the bucket and the code."""

    def __init__(self, message: str, *, bucket: str, code: str) -> None:
        super().__init__(message, service="s3", kind="refused")
        self.bucket = bucket
        self.code = code


class PayloadTooLarge(RetryableError):
    """A payload is over ``PAYLOAD_INLINE_MAX_BYTES`` and ``PAYLOAD_BUCKET`` is not set."""
