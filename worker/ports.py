"""The small interfaces the stage talks through. Adapters implement them over aioboto3;
the unit tests implement them in memory.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol, Required, TypedDict, Unpack

from worker.caching.anchor import WindowAnchor
from worker.caching.bills import ModelUsage
from worker.memory import CompactionPlan, FoldState, HistoryMessage


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """One SQS message as received: its body, handle and delivery count."""

    message_id: str
    receipt_handle: str
    body: str
    receive_count: int = 1
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: When SQS first accepted the message (``SentTimestamp``), epoch milliseconds.
    sent_timestamp_ms: int | None = None
    #: The X-Ray trace header the sender attached (``AWSTraceHeader``), if any.
    trace_header: str | None = None


@dataclass(frozen=True, slots=True)
class StoredDefect:
    """A stored attribute that is not what the table declares: which one (``model_usage.…``
    for a member of a bill), why (never its value), and the message's seq (None: the
    ``state`` item)."""

    attribute: str
    reason: str
    seq: int | None = None

    def describe(self) -> str:
        """``attribute: reason``, the form a rejection's reason takes."""
        return f"{self.attribute}: {self.reason}"


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """A conversation's newest items, read newest first: the fold state and the messages.

    ``malformed`` holds one reason per stored message item that was left out. ``older`` is
    where the next older page starts when the read stopped at its limit (None: nothing
    older is left unread); ``queries`` is how many Queries the page took. ``anchor`` is the
    cache-aligned window's anchor as the ``state`` item holds it (``window_anchor`` and
    ``window_anchor_folded_through``): None when either is missing or malformed. ``usage``
    holds the bills the writer stored with the page's answers (``model_usage``), newest
    first: empty when it stores none; ``bills_dropped`` the bills left out as malformed.
    ``ignored``: attributes read as their safe reading (absent); ``refusal``: a ``state``
    attribute no reading makes safe, which refuses the command.
    """

    state: FoldState
    messages: tuple[HistoryMessage, ...]
    malformed: tuple[str, ...] = ()
    older: str | None = None
    queries: int = 1
    anchor: WindowAnchor | None = None
    usage: tuple[ModelUsage, ...] = ()
    bills_dropped: tuple[StoredDefect, ...] = ()
    ignored: tuple[StoredDefect, ...] = ()
    refusal: StoredDefect | None = None

    def extended_by(self, older_page: HistoryPage) -> HistoryPage:
        """This page followed by the next older one (whose state item, if any, is ignored)."""
        return HistoryPage(
            state=self.state,
            messages=self.messages + older_page.messages,
            malformed=self.malformed + older_page.malformed,
            older=older_page.older,
            queries=self.queries + older_page.queries,
            anchor=self.anchor,
            usage=self.usage + older_page.usage,
            bills_dropped=self.bills_dropped + older_page.bills_dropped,
            ignored=self.ignored + older_page.ignored,
            refusal=self.refusal,
        )


@dataclass(frozen=True, slots=True)
class DeleteFailure:
    """One entry of a batch call that SQS refused (delete or change visibility)."""

    message_id: str
    code: str


@dataclass(frozen=True, slots=True)
class MessageDigest:
    """What the ledger keeps of a command's message: an HMAC-SHA256 of its UTF-8 text keyed
    by a salt drawn for its record alone (both in hex). Never the text; never ``sent_at``,
    which a producer's retry may stamp anew. The salt is the record's own, so equal questions
    in two records have unequal digests, and no table of digests computed once finds a
    question in any record."""

    salt: str
    value: str

    @classmethod
    def drawn(cls, message: str) -> MessageDigest:
        """The digest of ``message`` under a new random salt (128 bits)."""
        salt = secrets.token_hex(16)
        return cls(salt, salted_digest(salt, message))

    def matches(self, message: str) -> bool:
        """Whether ``message`` is the message this digest was made of."""
        return hmac.compare_digest(self.value, salted_digest(self.salt, message))


def salted_digest(salt: str, message: str) -> str:
    """HMAC-SHA256 of ``message`` (UTF-8) keyed by ``salt``, in hex."""
    return hmac.new(salt.encode("ascii"), message.encode("utf-8"), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class CommandClaim:
    """What :meth:`CommandLedger.begin` found: ``started`` (this caller owns the command),
    ``done`` (forwarded before), ``busy`` (another owner holds a live lease), or ``reused``
    (the record holds another message's digest: the producer gave a new message an id
    already used, so this command is rejected, never taken for a redelivery)."""

    state: Literal["started", "done", "busy", "reused"]
    lease_until: datetime | None = None
    #: The record's digest of the message, when ``started``: the done mark carries it on.
    digest: MessageDigest | None = None


@dataclass(frozen=True, slots=True)
class CommandHold:
    """A command as one owner holds it in the ledger. An owner names one delivery in one
    worker (worker, message id, receive count), so a redelivery is another owner."""

    conversation_id: str
    command_id: str
    owner: str

    def done(self, now: datetime, digest: MessageDigest | None = None) -> DoneMark:
        """This hold's :class:`DoneMark`, stamped ``now``."""
        return DoneMark(self.conversation_id, self.command_id, self.owner, now, digest)


@dataclass(frozen=True, slots=True)
class DoneMark:
    """A forwarded command, to be recorded ``done``, with its message's digest (the
    ``done`` record replaces the claim's, so it carries the digest on)."""

    conversation_id: str
    command_id: str
    owner: str
    now: datetime
    digest: MessageDigest | None = None


class CommandLedger(Protocol):
    """Idempotency on ``command_id``: who is forwarding a command, and whether it is done.

    ``message`` is the command's message: the record keeps its :class:`MessageDigest`, so a
    delivery of the same id with another message is told apart from a redelivery. A record
    without one (a :class:`DoneMark` without one) answers every delivery of its id as a
    redelivery."""

    async def begin(
        self, hold: CommandHold, *, lease: timedelta, now: datetime, message: str
    ) -> CommandClaim: ...

    async def renew(self, hold: CommandHold, *, lease: timedelta, now: datetime) -> bool: ...

    async def finish(self, mark: DoneMark) -> None: ...

    async def abandon(self, hold: CommandHold) -> None: ...


class ForwardingLedger:
    """A CommandLedger that passes every call to ``inner``: the base of the wrappers that
    change one call (how ``finish`` is written or counted) and leave the rest alone."""

    def __init__(self, inner: CommandLedger) -> None:
        self._inner = inner

    async def begin(
        self, hold: CommandHold, *, lease: timedelta, now: datetime, message: str
    ) -> CommandClaim:
        return await self._inner.begin(hold, lease=lease, now=now, message=message)

    async def renew(self, hold: CommandHold, *, lease: timedelta, now: datetime) -> bool:
        return await self._inner.renew(hold, lease=lease, now=now)

    async def finish(self, mark: DoneMark) -> None:
        await self._inner.finish(mark)

    async def abandon(self, hold: CommandHold) -> None:
        await self._inner.abandon(hold)


class ObjectStore(Protocol):
    async def put(self, bucket: str, key: str, data: bytes) -> None:
        """Write ``data`` as ``application/json``, encrypted at rest."""
        ...

    async def get(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        """Read an object of at most ``max_bytes``; raises :class:`~worker.errors.ObjectMissing`
        when it is not there and :class:`~worker.errors.ObjectTooLarge` when it is larger
        (never reading more than ``max_bytes + 1`` bytes of it)."""
        ...


class HistoryStore(Protocol):
    async def load_page(
        self, conversation_id: str, limit: int, *, older_than: str | None = None
    ) -> HistoryPage:
        """The state item and the newest messages, newest first, in one read; with
        ``older_than`` (a page's ``older``), the messages before that point instead."""
        ...


class WindowAnchors(Protocol):
    """The cache-aligned window's anchor on a conversation's ``state`` item, written only by
    this stage (the compactor leaves it alone)."""

    async def store_anchor(self, conversation_id: str, anchor: WindowAnchor) -> None:
        """Set ``window_anchor`` and ``window_anchor_folded_through``, and the summary in
        force the anchor carries (``window_summary``, ``window_summary_folded_through``;
        removed when it carries none), in one write, leaving every other attribute of the
        item as it is. Unconditional: of two turns racing,
        the last write wins, and the loser's next turn at worst re-anchors (a cache miss,
        never a rule: the window checks any anchor it is given)."""
        ...


class SendOptions(TypedDict, total=False):
    """How a message is addressed, besides its body: the keyword arguments of every
    :meth:`MessageSender.send`. ``group_id`` and ``deduplication_id`` are the FIFO
    queue's (a standard queue ignores them); ``attributes`` its message attributes."""

    group_id: Required[str]
    deduplication_id: Required[str]
    attributes: Mapping[str, str | int] | None


class MessageSender(Protocol):
    async def send(self, body: str, **options: Unpack[SendOptions]) -> str:
        """Send one message; returns its message id."""
        ...


class MessageSource(Protocol):
    async def receive(self, max_messages: int, wait_seconds: int) -> list[ReceivedMessage]: ...

    async def delete_batch(self, messages: Sequence[ReceivedMessage]) -> list[DeleteFailure]:
        """Delete up to ten messages; returns the entries SQS refused."""
        ...

    async def change_visibility_batch(
        self, messages: Sequence[ReceivedMessage], timeout_seconds: int
    ) -> list[DeleteFailure]:
        """Set the visibility of up to ten messages; returns the entries SQS refused."""
        ...


@dataclass(frozen=True, slots=True)
class FoldClaim:
    """One claim of a fold request: ``plan`` recorded on conversation ``conversation_id``'s
    request mark at ``claimed_at``, if the mark is still the one ``seen`` holds. The same
    value puts the mark back (:meth:`FoldClaims.release_compaction`)."""

    conversation_id: str
    plan: CompactionPlan
    seen: FoldState
    claimed_at: datetime


class FoldClaims(Protocol):
    """The request mark on a conversation's ``state`` item, written conditionally."""

    async def claim_compaction(
        self, claim: FoldClaim, *, anchor: WindowAnchor | None = None
    ) -> bool:
        """Record ``claim.plan`` as the newest request, stamped ``claim.claimed_at``, if the
        request mark is still the one ``claim.seen`` holds; True if this caller won the
        claim. With ``anchor``, the same write also stores the cache-aligned window's anchor
        (one write, not two, when a turn both claims and re-anchors); a lost claim stores
        nothing."""
        ...

    async def release_compaction(self, claim: FoldClaim) -> None:
        """Put back the mark ``claim.seen`` held, if the mark is still this caller's
        ``claim`` (its request could not be sent)."""
        ...
