"""``worker erase``: remove every copy the stage made of one conversation (docs/RETENTION.md).

In this order: its dead letters in the converse queue's dead-letter queue (first, while the
objects their pointers name are still there to read), the payload objects under its prefix
and those its dead letters named, its command records in the ledger table, and the stage's
attributes of its ``state`` item. Nothing another stage owns: the history's messages, the
writer's ``folded_through`` and ``fold_summary``, other stages' queues. Each step reads
before it removes, so a run that finds nothing removes nothing (idempotent), and a dry run
counts what a run would remove. Nothing here prints or logs content, nor the conversation id.

A turn of the conversation in flight during a run writes only where the run looks (its
command record under the conversation, its ``state`` item, objects under its prefix, a dead
letter naming it): whatever lands after a step read its part is removed by the next run.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from worker.adapters.erasure import BucketObjects, LedgerRecords, StageState
from worker.adapters.s3 import S3ObjectStore
from worker.adapters.sqs import SqsQueue
from worker.adapters.sqs_admin import QueueAdmin
from worker.app.runtime import Clients
from worker.cli.dlq_operations import HOLD_SECONDS
from worker.cli.erase_dead_letters import DeadLetterScan, PointerReader, scan_dead_letters
from worker.errors import ConfigError
from worker.settings import Settings
from worker.turn.payloads import PayloadKind, conversation_prefix, kind_of_key

#: Command records deleted at once.
DELETE_CONCURRENCY = 10
#: How an object reached through a dead letter's pointer, outside the key scheme (an older
#: key of the stage's), is counted.
OLDER_KEY = "dead-letter (older key)"


@dataclass(frozen=True, slots=True)
class ErasureStores:
    """Where ``worker erase`` looks: ``objects`` is None without a PAYLOAD_BUCKET."""

    ledger: LedgerRecords
    state: StageState
    objects: BucketObjects | None
    dead_letters: SqsQueue
    admin: QueueAdmin
    reader: PointerReader


async def stores_of(clients: Clients, settings: Settings) -> ErasureStores:
    """Where the worker with ``settings`` keeps its copies; the dead-letter queue is the one
    the converse queue's RedrivePolicy names."""
    description = await SqsQueue(clients.sqs, settings.converse_queue_url).describe()
    if description.dead_letter is None:
        raise ConfigError("CONVERSE_QUEUE_URL: the queue has no RedrivePolicy")
    bucket = settings.payload_bucket
    return ErasureStores(
        ledger=LedgerRecords(clients.dynamodb, settings.ledger_table),
        state=StageState(clients.dynamodb, settings.history_table),
        objects=BucketObjects(clients.s3, bucket) if bucket else None,
        dead_letters=description.dead_letter,
        admin=QueueAdmin(clients.sqs),
        reader=PointerReader(S3ObjectStore(clients.s3), bucket, settings.inbound_payloads),
    )


@dataclass
class Erasure:
    """Counts of what a run removed (or, dry, would remove), per kind; never content."""

    dry_run: bool
    command_records: int = 0
    state_attributes: int = 0
    payload_objects: Counter[str] = field(default_factory=Counter)
    dead_letters: DeadLetterScan = field(default_factory=DeadLetterScan)
    #: Removals a store refused (command records, objects, dead letters).
    refused: int = 0

    @property
    def looked_at_everything(self) -> bool:
        """Every dead letter was read, and nothing the run meant to remove was refused."""
        letters = self.dead_letters
        incomplete = letters.in_flight or letters.unseen or letters.unchecked or letters.refused
        return not (incomplete or self.refused)

    def counts(self) -> dict[str, Any]:
        """The ``--json`` document."""
        letters = self.dead_letters
        return {
            "dry_run": self.dry_run,
            "command_records": self.command_records,
            "state_attributes": self.state_attributes,
            "payload_objects": {
                **{kind.value: 0 for kind in PayloadKind},
                **dict(self.payload_objects),
            },
            "dead_letters": letters.matched,
            "dead_letters_kept": letters.kept,
            "dead_letters_pointing_at_missing_objects": letters.gone,
            "dead_letters_unreadable": letters.unchecked,
            "dead_letters_in_flight": letters.in_flight,
            "dead_letters_unseen": letters.unseen,
            "dead_letter_queue_max_receive_count": letters.max_receive_count,
            "refused": self.refused + letters.refused,
            "dead_letters_not_released": letters.unreleased,
            "complete": self.looked_at_everything,
        }

    def lines(self) -> list[str]:
        letters = self.dead_letters
        verb = "would remove (dry run: nothing removed)" if self.dry_run else "removed"
        kinds = ", ".join(f"{kind} {n}" for kind, n in self.counts()["payload_objects"].items())
        out = [
            f"{verb}:",
            f"  {self.command_records:>6}  command records",
            f"  {self.state_attributes:>6}  state attributes",
            f"  {sum(self.payload_objects.values()):>6}  payload objects ({kinds})",
            f"  {letters.matched:>6}  dead letters",
            "kept:",
            f"  {letters.kept:>6}  dead letters of other conversations or of none",
        ]
        if letters.gone:
            out.append(f"  {letters.gone:>6}  of them point at an object that no longer exists")
        if letters.unchecked:
            out.append(f"  {letters.unchecked:>6}  of them point at an object it could not read")
        if letters.in_flight or letters.unseen:
            out.append(
                f"not looked at: {letters.in_flight} dead letter(s) in flight with another "
                f"reader when the scan began, {letters.unseen} visible when it ended"
            )
        if letters.max_receive_count is not None:
            out.append(
                "note: the dead-letter queue has a RedrivePolicy of its own (maxReceiveCount "
                f"{letters.max_receive_count}); each run counts one receive on every dead "
                "letter it reads"
            )
        if self.refused or letters.refused:
            out.append(f"refused: {self.refused + letters.refused} removal(s)")
        if letters.unreleased:
            out.append(
                f"{letters.unreleased} dead letter(s) could not be released: they come back by "
                f"themselves within {HOLD_SECONDS} s"
            )
        return out


async def erase(stores: ErasureStores, conversation_id: str, *, dry_run: bool) -> Erasure:
    """Remove (``dry_run``: count) every copy the stage made of ``conversation_id``."""
    erasure = Erasure(dry_run=dry_run)
    erasure.dead_letters = await scan_dead_letters(
        stores.dead_letters,
        conversation_id,
        stores.reader,
        admin=stores.admin,
        dry_run=dry_run,
    )
    if stores.objects is not None:
        await erase_objects(erasure, stores.objects, conversation_id)
    keys = await stores.ledger.sort_keys(conversation_id)
    erasure.command_records = len(keys)
    if not dry_run:
        for start in range(0, len(keys), DELETE_CONCURRENCY):
            await asyncio.gather(
                *(
                    stores.ledger.delete(conversation_id, key)
                    for key in keys[start : start + DELETE_CONCURRENCY]
                )
            )
    state = stores.state
    found = await (state.present(conversation_id) if dry_run else state.remove(conversation_id))
    erasure.state_attributes = len(found)
    return erasure


async def erase_objects(erasure: Erasure, objects: BucketObjects, conversation_id: str) -> None:
    """The objects under the conversation's prefix, and the stage's objects its dead letters
    named (an offloaded dead letter filed as unattributed, or under an older key)."""
    keys = set(await objects.keys(conversation_prefix(conversation_id)))
    keys |= erasure.dead_letters.stage_objects
    for key in keys:
        erasure.payload_objects[str(kind_of_key(key) or OLDER_KEY)] += 1
    if erasure.dry_run or not keys:
        return
    refused = await objects.delete(sorted(keys))
    erasure.refused += len(refused)
    for failure in refused:
        erasure.payload_objects[str(kind_of_key(failure.key) or OLDER_KEY)] -= 1
