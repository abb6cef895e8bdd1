"""``worker erase``'s scan of the dead-letter queue over an in-memory queue and bucket: whose
each dead letter is (its body, or the object its pointer names), what is deleted, what is
put back as it was, and what the scan says it could not see; and the report's lines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from worker.adapters.sqs_admin import QueueDepth
from worker.cli import main
from worker.cli.erase_dead_letters import (
    MAX_POINTER_DEPTH,
    DeadLetterScan,
    PointerReader,
    Verdict,
    attribute,
    scan_dead_letters,
)
from worker.cli.erase_operations import Erasure
from worker.delivery.pointers import InboundPayloads, pointer_body
from worker.errors import ObjectKeyRefused, ObjectMissing
from worker.ports import DeleteFailure, ReceivedMessage
from worker.turn.payloads import PayloadKind, payload_key

OURS, OTHERS = "matter-1", "matter-2"
BUCKET, PRODUCERS = "stage-bucket", "producer-bucket"


def command(conversation: str, message: str = "PRIVILEGED") -> str:
    return json.dumps({"type": "converse", "conversation_id": conversation, "message": message})


@dataclass
class Objects:
    """A bucket in memory: bytes, or the error a read of the key raises; reads counted."""

    stored: dict[tuple[str, str], bytes | Exception] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)

    async def put(self, bucket: str, key: str, data: bytes) -> None:
        self.stored[(bucket, key)] = data

    async def get(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
        self.reads.append(key)
        found = self.stored.get((bucket, key), ObjectMissing(key))
        if isinstance(found, Exception):
            raise found
        return found


def reader(objects: Objects) -> PointerReader:
    return PointerReader(objects, BUCKET, InboundPayloads(frozenset({BUCKET, PRODUCERS}), 1000))


@pytest.mark.parametrize(
    ("body", "stored", "verdict", "stage_objects", "reads"),
    [
        (command(OURS), {}, Verdict.THIS, (), 0),
        (command(OURS, " "), {}, Verdict.THIS, (), 0),  # rejected for any reason: still ours
        (command(OTHERS), {}, Verdict.OTHER, (), 0),
        ("not json", {}, Verdict.OTHER, (), 0),
        # under our prefix: ours by its key alone, and the stage's object
        (pointer_body(BUCKET, payload_key(OURS, "m", PayloadKind.DEAD_LETTER)), {},
         Verdict.THIS, (payload_key(OURS, "m", PayloadKind.DEAD_LETTER),), 0),
        # under another conversation's prefix: not read
        (pointer_body(BUCKET, payload_key(OTHERS, "m", PayloadKind.DEAD_LETTER)), {},
         Verdict.OTHER, (), 0),
        # a producer's object: read, and left to its producer
        (pointer_body(PRODUCERS, "uuid"), {(PRODUCERS, "uuid"): command(OURS)},
         Verdict.THIS, (), 1),
        # the stage's unattributed object holding a producer's pointer: both read
        (pointer_body(BUCKET, payload_key(None, "m", PayloadKind.DEAD_LETTER)),
         {(BUCKET, payload_key(None, "m", PayloadKind.DEAD_LETTER)):
              pointer_body(PRODUCERS, "uuid").encode(),
          (PRODUCERS, "uuid"): command(OURS)},
         Verdict.THIS, (payload_key(None, "m", PayloadKind.DEAD_LETTER),), 2),
        (pointer_body(PRODUCERS, "gone"), {}, Verdict.GONE, (), 1),
        (pointer_body(PRODUCERS, "key"), {(PRODUCERS, "key"): ObjectKeyRefused("k")},
         Verdict.UNCHECKED, (), 1),
        (pointer_body("a-bucket-the-stage-does-not-read", "k"), {}, Verdict.UNCHECKED, (), 0),
    ],
    ids=["inline", "blank", "another", "no-command", "our-prefix", "their-prefix", "producer",
         "nested", "missing", "key-refused", "other-bucket"],
)  # fmt: skip
async def test_a_dead_letter_is_the_conversations_when_its_body_or_object_names_it(
    body: str,
    stored: dict[tuple[str, str], bytes | str | Exception],
    verdict: Verdict,
    stage_objects: tuple[str, ...],
    reads: int,
) -> None:
    objects = Objects({k: v.encode() if isinstance(v, str) else v for k, v in stored.items()})
    found = await attribute(body, {}, OURS, reader(objects))
    assert (found.verdict, found.stage_objects, len(objects.reads)) == (
        verdict,
        stage_objects,
        reads,
    )


async def test_a_pointer_to_itself_is_followed_only_so_far() -> None:
    """An object that points at itself (a broken or hostile producer) ends the walk after
    MAX_POINTER_DEPTH reads, unchecked: it never loops."""
    body = pointer_body(PRODUCERS, "loop")
    objects = Objects({(PRODUCERS, "loop"): body.encode()})
    found = await attribute(body, {}, OURS, reader(objects))
    assert (found.verdict, objects.reads) == (Verdict.UNCHECKED, ["loop"] * MAX_POINTER_DEPTH)


@dataclass
class DeadLetters:
    """A dead-letter queue in memory: a receive takes up to ``max_messages`` of the visible
    ones and hides them; a delete or a release names a message by its receipt handle."""

    visible: list[ReceivedMessage]
    held: dict[str, ReceivedMessage] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)
    refuse_release: set[str] = field(default_factory=set)
    url: str = "dlq"
    #: ``visible`` after this many receives is refilled by these (a hold that ran out).
    come_back: list[ReceivedMessage] = field(default_factory=list)

    async def receive(
        self, max_messages: int, wait_seconds: int, *, visibility_timeout: int | None = None
    ) -> list[ReceivedMessage]:
        if not self.visible and self.come_back:
            self.visible, self.come_back = self.come_back, []
        batch, self.visible = self.visible[:max_messages], self.visible[max_messages:]
        self.held.update((m.message_id, m) for m in batch)
        return batch

    async def delete_batch(self, messages: Sequence[ReceivedMessage]) -> list[DeleteFailure]:
        assert len(messages) <= 10
        refused = [
            DeleteFailure(m.message_id, "Invalid") for m in messages if m.message_id in self.refuse
        ]
        self.deleted += [m.message_id for m in messages if m.message_id not in self.refuse]
        return refused

    async def change_visibility_batch(
        self, messages: Sequence[ReceivedMessage], timeout_seconds: int
    ) -> list[DeleteFailure]:
        assert len(messages) <= 10 and timeout_seconds == 0
        self.released += [m.message_id for m in messages]
        return [
            DeleteFailure(m.message_id, "Invalid")
            for m in messages
            if m.message_id in self.refuse_release
        ]


@dataclass
class Admin:
    depths: list[QueueDepth]

    async def depth(self, url: str) -> QueueDepth:
        return self.depths.pop(0)


def letter(i: int, body: str) -> ReceivedMessage:
    return ReceivedMessage(f"m{i}", f"r{i}", body)


def queue(*bodies: str) -> DeadLetters:
    return DeadLetters([letter(i, body) for i, body in enumerate(bodies)])


async def scan(
    dlq: DeadLetters, *, dry_run: bool = False, before: QueueDepth | None = None, after: int = 0
) -> DeadLetterScan:
    """Scan ``dlq`` for OURS over an empty bucket; ``before`` the queue's counts as the scan
    begins, ``after`` the messages visible as it ends."""
    objects = Objects()
    admin = Admin([before or QueueDepth(0, 0), QueueDepth(after, 0)])
    return await scan_dead_letters(
        dlq,
        OURS,
        reader(objects),
        admin=admin,
        dry_run=dry_run,
    )


async def test_the_conversations_dead_letters_are_deleted_and_every_other_put_back() -> None:
    """Twenty-five dead letters, every fifth ours: ours deleted as each batch is read, the
    twenty others released (visibility 0) once, at the end, none deleted."""
    bodies = [command(OURS if i % 5 == 0 else OTHERS) for i in range(25)]
    dlq = queue(*bodies)
    result = await scan(dlq)
    ours = [f"m{i}" for i in range(0, 25, 5)]
    assert sorted(dlq.deleted) == sorted(ours)
    assert sorted(dlq.released) == sorted(f"m{i}" for i in range(25) if f"m{i}" not in ours)
    assert (result.matched, result.kept, result.refused) == (5, 20, 0)


async def test_a_dry_run_deletes_nothing_and_puts_everything_back() -> None:
    dlq = queue(command(OURS), command(OTHERS), command(OURS))
    result = await scan(dlq, dry_run=True)
    assert dlq.deleted == []
    assert sorted(dlq.released) == ["m0", "m1", "m2"]
    assert result.matched == 2


async def test_a_message_back_from_a_hold_that_ran_out_is_read_once_and_released_by_its_new_handle(
) -> None:  # fmt: skip
    dlq = queue(command(OTHERS))
    dlq.come_back = [ReceivedMessage("m0", "r0-again", command(OTHERS))]
    result = await scan(dlq)
    assert dlq.released == ["m0"]
    assert dlq.held["m0"].receipt_handle == "r0-again"
    assert result.kept == 1


async def test_what_the_scan_cannot_see_is_counted_never_guessed() -> None:
    """In flight with another reader when it began, visible when it ended (arrived since, or
    behind another of its FIFO group), a delete refused, a pointer it may not read: each
    counted, and the erasure then says it looked at less than everything."""
    dlq = queue(command(OURS), pointer_body("a-bucket-the-stage-does-not-read", "k"))
    dlq.refuse = {"m0"}
    result = await scan(dlq, before=QueueDepth(0, 3, max_receive_count=4), after=2)
    counts = (result.in_flight, result.unseen, result.refused, result.unchecked)
    assert counts == (3, 2, 1, 1)
    assert result.max_receive_count == 4
    erasure = Erasure(dry_run=False, dead_letters=result)
    assert not erasure.looked_at_everything
    assert not Erasure(dry_run=False).counts()["refused"]


async def test_a_refused_release_is_reported_and_leaves_the_erasure_complete() -> None:
    """A message whose release SQS refuses comes back when its hold runs out, untouched."""
    dlq = queue(command(OTHERS))
    dlq.refuse_release = {"m0"}
    erasure = Erasure(dry_run=False, dead_letters=await scan(dlq))
    assert erasure.counts()["dead_letters_not_released"] == 1
    assert erasure.looked_at_everything
    assert "could not be released: they come back by themselves within 120 s" in "\n".join(
        erasure.lines()
    )


async def test_held_messages_are_released_when_the_scan_fails_midway() -> None:
    class Failing(Objects):
        async def get(self, bucket: str, key: str, *, max_bytes: int) -> bytes:
            raise RuntimeError("the bucket went away")

    dlq = queue(command(OTHERS), pointer_body(PRODUCERS, "k"))
    with pytest.raises(RuntimeError):
        await scan_dead_letters(
            dlq,
            OURS,
            PointerReader(Failing(), BUCKET, InboundPayloads(frozenset({PRODUCERS}), 10)),
            admin=Admin([QueueDepth(0, 0)]),
            dry_run=False,
        )
    assert dlq.released == ["m0"]


def test_the_report_is_counts_per_kind_and_never_names_the_conversation() -> None:
    erasure = Erasure(dry_run=True, command_records=2, state_attributes=7)
    erasure.payload_objects.update({"prompt": 3, "dead-letter": 1})
    lines = "\n".join(erasure.lines())
    assert lines.startswith("would remove (dry run: nothing removed):")
    assert "       4  payload objects (prompt 3, fold 0, dead-letter 1)" in lines
    assert erasure.counts()["payload_objects"] == {"prompt": 3, "fold": 0, "dead-letter": 1}
    assert erasure.looked_at_everything


@pytest.mark.parametrize("conversation", ["", "x" * 257])
def test_a_conversation_id_the_contract_would_refuse_is_refused_before_anything_runs(
    conversation: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["erase", "--conversation", conversation])
    assert exit_.value.code == 2
    assert "1 to 256 characters" in capsys.readouterr().err
