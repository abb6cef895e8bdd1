"""DynamoDB: the command ledger, idempotency on ``command_id``, in the stage's own table
(``LEDGER_TABLE``), never the history table other stages own.

A claim (``begin``) is one conditional UpdateItem per new command: it must be answered before
the send. The done mark after the send is a plain put of the whole ``done`` record, so the
marks of concurrent turns can leave together in one BatchWriteItem
(:class:`worker.delivery.done_marks.BatchingLedger`); a mark DynamoDB leaves unprocessed fails on
its own, and the stage tries it again with its backoff.

Both records keep the message's :class:`~worker.ports.MessageDigest` (never the text): a
salt drawn for the record and the HMAC of the message under it. A refused claim whose record
holds the digest of another message is an id reused for a new message, not a redelivery,
and an expired lease is taken over only for the same message. The salt is the record's, so
checking a delivery against a record takes the record first: a takeover is two calls (the
refusal returns the record, then the conditional takeover), a new command one.

Every request is built by a pure function of :mod:`worker.adapters.ledger_records`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from worker.adapters.client_errors import aws_call
from worker.adapters.dynamodb import condition_held
from worker.adapters.ledger_records import (
    COMMAND_PREFIX,
    claim_on_record,
    claim_request,
    command_get_request,
    done_marks_request,
    epoch,
    lease_request,
    record_digest,
    takeover_request,
)
from worker.adapters.legacy_ledger import LegacyRecords
from worker.errors import RetryableError, StoreUnavailable
from worker.ports import CommandClaim, CommandHold, DoneMark, MessageDigest

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import UpdateItemInputTypeDef

#: A takeover whose condition fails (another owner took the record between the refusal and
#: the takeover) reads the record again and decides once more, this many times at most.
TAKEOVER_TRIES = 2


class DynamoCommandLedger:
    """Implements CommandLedger: one record per command, ``pk = <conversation_id>``,
    ``sk = cmd#<command_id>``, in the stage's ledger table.

    States: ``in_progress`` (with an owner and a lease) and ``done``, each with the
    message's salted digest. With ``legacy``, a new claim also reads the record the previous
    release kept in the history table (:mod:`worker.adapters.legacy_ledger`): a command it
    forwarded or still holds is neither forwarded again nor lost while the ledger moves.
    """

    def __init__(
        self, client: DynamoDBClient, table: str, *, legacy: LegacyRecords | None = None
    ) -> None:
        self._client = client
        self._table = table
        self._legacy = legacy

    async def begin(
        self, hold: CommandHold, *, lease: timedelta, now: datetime, message: str
    ) -> CommandClaim:
        """Take the command: new, or in progress under a lease that has expired (or the
        hold's owner's own). Refused, a record holding another message's digest is
        ``reused``, whatever its state."""
        digest = MessageDigest.drawn(message)
        request = claim_request(self._table, hold, lease=lease, now=now, digest=digest)
        old = await self._update(request, hold)
        if old is None:
            return await self._started(hold, digest, now=now, message=message)
        for _ in range(TAKEOVER_TRIES):
            found = claim_on_record(old, hold, message=message, now=now)
            if found is not None:
                return found
            kept = record_digest(old)
            request = takeover_request(self._table, hold, lease=lease, now=now, digest=kept)
            taken = await self._update(request, hold)
            if taken is None:
                return await self._started(hold, kept, now=now, message=message)
            old = taken
        # Taken and given up again under our feet twice: try again in a moment.
        return claim_on_record(old, hold, message=message, now=now) or CommandClaim(
            state="busy", lease_until=now
        )

    async def _started(
        self, hold: CommandHold, digest: MessageDigest | None, *, now: datetime, message: str
    ) -> CommandClaim:
        """The claim of a record this owner now holds, checked against the previous
        release's record first when there is one to read (new or taken over, the command
        may be one that release forwarded); its lease is given up if that check fails."""
        claim = CommandClaim(state="started", digest=digest)
        if self._legacy is None:
            return claim
        try:
            return await self._check_legacy(self._legacy, hold, claim, now=now, message=message)
        except RetryableError:
            with contextlib.suppress(RetryableError):  # else the lease runs out by itself
                await self.abandon(hold)
            raise

    async def _check_legacy(
        self,
        legacy: LegacyRecords,
        hold: CommandHold,
        claim: CommandClaim,
        *,
        now: datetime,
        message: str,
    ) -> CommandClaim:
        """A new record's command as the previous release's record in the history table
        has it: ``done`` there is done here too (marked so), a live lease or another
        message there gives this record up, nothing there leaves the claim as it is."""
        verdict = await legacy.claim(hold, message=message, now=now)
        if verdict is None:
            return claim
        if verdict.state == "done":
            await self.finish(hold.done(now, claim.digest))
        else:
            await self.abandon(hold)
        return verdict

    async def _update(
        self, request: UpdateItemInputTypeDef, hold: CommandHold
    ) -> Mapping[str, object] | None:
        """One conditional UpdateItem: None when it was written, else the record as the
        refusal returned it (read again when the refusal carries none)."""
        with aws_call("dynamodb.UpdateItem"):
            try:
                await self._client.update_item(**request)
            except self._client.exceptions.ConditionalCheckFailedException as exc:
                # ALL_OLD puts the record in the refusal, a key botocore's stubs do not
                # declare for an error response: read it as a plain mapping.
                refusal: Mapping[str, object] = exc.response
                old = refusal.get("Item")
            else:
                return None
        return old if isinstance(old, Mapping) else await self._get(hold)

    async def renew(self, hold: CommandHold, *, lease: timedelta, now: datetime) -> bool:
        """Push this owner's lease out; False if the command is no longer this owner's."""
        return await self._set_lease(hold, epoch(now + lease))

    async def finish(self, mark: DoneMark) -> None:
        """Mark the command done: a redelivery is then deleted without a second forward."""
        [result] = await self.finish_batch([mark])
        if result is not None:
            raise result

    async def finish_batch(self, marks: Sequence[DoneMark]) -> list[RetryableError | None]:
        """Write the ``done`` records of up to 25 commands in one BatchWriteItem.

        Returns one result per mark: None once written, or the error of a mark DynamoDB
        left unprocessed (throttled), for the caller to try again later. A failure of the
        whole call is raised. Two marks of one command (a takeover finishing beside the
        turn it took over from) are one put: DynamoDB refuses a batch naming a key twice.
        """
        if not marks:
            return []
        request = done_marks_request(self._table, marks)
        with aws_call("dynamodb.BatchWriteItem"):
            response = await self._client.batch_write_item(**request)
        unprocessed = {
            (item["pk"].get("S"), item["sk"].get("S", "").removeprefix(COMMAND_PREFIX))
            for request in (response.get("UnprocessedItems") or {}).get(self._table, [])
            if (item := request.get("PutRequest", {}).get("Item"))
        }
        return [
            StoreUnavailable(
                "dynamodb.BatchWriteItem left the done mark unprocessed",
                service="dynamodb",
                kind="throttled",
            )
            if (m.conversation_id, m.command_id) in unprocessed
            else None
            for m in marks
        ]

    async def abandon(self, hold: CommandHold) -> None:
        """Expire this owner's lease now, so a retry need not wait it out."""
        await self._set_lease(hold, 0)

    async def _set_lease(self, hold: CommandHold, until: int) -> bool:
        """Set ``lease_until`` if the command is still in progress under the hold's owner."""
        request = lease_request(self._table, hold, until=until)
        return await condition_held(self._client, self._client.update_item(**request))

    async def _get(self, hold: CommandHold) -> Mapping[str, object]:
        request = command_get_request(self._table, hold.conversation_id, hold.command_id)
        with aws_call("dynamodb.GetItem"):
            response = await self._client.get_item(**request)
        return response.get("Item", {})
