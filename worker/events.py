"""Every event the stage logs, declared once: its name, the levels it is logged at, what it
means, and for a warning or an error what the operator does.

A declaration, not a logger: nothing here logs, and it imports nothing of :mod:`worker`.
``docs/reference/events.md`` and the runbook's event table are rendered from it, and a test
checks it against the source: every ``clerk.*`` name the code logs is declared here, every
event declared here is logged, and the levels and fields each call site shows are the
declared ones.

No event carries message content, fold summaries or command bodies: the fields are ids,
counts, seqs, sizes, reasons, codes and error types. Besides its own fields, every line of a
turn carries the ids bound for it (``conversation_id``, ``command_id``, ``message_id``,
``receive_count``, and ``trace_id`` when the command came in a trace).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Level = Literal["info", "warning", "error", "critical"]

#: The levels of an event logged through ``worker.logs.log_failure``: warning, with the
#: error's text, for the stage's own errors (their messages never carry content); error, by
#: the exception's type alone, for anything else (a defect, or a library's exception).
FAILURE: tuple[Level, ...] = ("warning", "error")


@dataclass(frozen=True, slots=True)
class Event:
    """One log event: ``action`` is what the operator does, for every event logged at
    warning or above (and for an info event an operator may be asked about)."""

    name: str
    levels: tuple[Level, ...]
    meaning: str
    action: str | None = None
    fields: tuple[str, ...] = ()


#: The stage's own events: the life cycle, receiving and settling, leases, a dependency
#: failing for everyone, one command's turn, operating it.
EVENTS: tuple[Event, ...] = (
    # The worker's life cycle.
    Event(
        "clerk.converse_worker_started",
        ("info",),
        "The consumer started: its concurrency, the converse queue's visibility timeout and "
        "the longest a stop can take.",
        fields=("concurrency", "visibility_timeout", "stop_seconds"),
    ),
    Event(
        "clerk.converse_model_unknown",
        ("warning",),
        "MODEL_ID names a model the stage's table does not know (worker/caching/models.py): "
        "the cache policy starts from PROMPT_CACHE_MIN_TOKENS if set, else (the sliding mode "
        "only) the table's highest minimum (`min_tokens`), and offers no `1h` (`offers_1h`); "
        "commands are refused for their size only against MODEL_CONTEXT_TOKENS "
        "(`context_tokens`, null when unset).",
        "Check MODEL_ID against the model stage's; if the model is new, set "
        "PROMPT_CACHE_MIN_TOKENS and MODEL_CONTEXT_TOKENS from its documentation, and add its "
        "row to the table.",
        fields=("model_id", "min_tokens", "offers_1h", "context_tokens"),
    ),
    Event(
        "clerk.converse_resource_checked",
        ("info",),
        "At start-up, a resource the stage uses answered its check: it is there and the role "
        "may make the stage's calls on it (`setting` names it, `resource` is its value; "
        "`attempts`, the calls it took).",
        fields=("setting", "resource", "attempts"),
    ),
    Event(
        "clerk.converse_resource_check_failed",
        ("warning",),
        "At start-up, a resource's check failed for a passing reason (throttling, 5xx, a "
        "connection error: `error`, the operation and its code); it is tried again in "
        "`retry_in` seconds, within STARTUP_TIMEOUT_SECONDS.",
        "None if the worker then starts. If the start-up ends unanswered, check the network "
        "path and the endpoint (AWS_ENDPOINT_URL, the region) and the service's health.",
        fields=("setting", "resource", "error", "retry_in"),
    ),
    Event(
        "clerk.converse_resource_refused",
        ("error",),
        "At start-up, a resource was refused: it does not exist, the role may not make the "
        "stage's calls on it, or the converse queue's settings do not allow a safe run "
        "(`reason`). The worker stops at once with the reason on stderr, exit code 2.",
        "Fix what the reason names: correct the setting, create the resource, or grant the "
        "action it names to the task role (and, for a resource of another account, in that "
        "resource's policy); the worker starts once it can use every resource.",
        fields=("setting", "resource", "reason"),
    ),
    Event(
        "clerk.converse_resource_unanswered",
        ("error",),
        "At start-up, a resource's check was still failing for a passing reason (or still "
        "waiting for its answer) when STARTUP_TIMEOUT_SECONDS ran out (`error`: its last "
        "failure; `attempts`); the worker stops with the reason on stderr, exit code 2.",
        "Check the network path to the service, the endpoint and region, and the service's "
        "health; the platform starts the worker again.",
        fields=("setting", "resource", "error", "attempts"),
    ),
    Event(
        "clerk.converse_worker_draining",
        ("info",),
        "A stop was asked for: receiving has stopped and the turns in flight are given "
        "SHUTDOWN_GRACE_SECONDS to finish.",
        fields=("in_flight",),
    ),
    Event(
        "clerk.converse_drain_timed_out",
        ("warning",),
        "At a stop, turns still unfinished after SHUTDOWN_GRACE_SECONDS were cancelled and "
        "their messages released for another worker.",
        "Nothing is lost (the messages are visible again at once). If it happens at every "
        "stop, turns are slow: look at TurnLatency and at `clerk.converse_dependency_failing`.",
        fields=("unfinished",),
    ),
    Event(
        "clerk.converse_messages_released",
        ("info",),
        "Messages this worker will not finish (at a stop, or a held turn given up) were made "
        "visible again at once.",
        fields=("count",),
    ),
    Event(
        "clerk.converse_worker_stopped",
        ("info",),
        "The consumer stopped: in-flight work finished or released, deletes flushed.",
    ),
    # Receiving and settling messages.
    Event(
        "clerk.converse_receive_failed",
        FAILURE,
        "A receive from the converse queue failed; the loop backs off (`retry_in`, seconds) "
        "and tries again. At a stop, the poll under way failed.",
        "Transient failures need nothing. If it repeats, check the endpoint, the network and "
        "that the role may call sqs:ReceiveMessage; an error-level line is a defect to report "
        "with its `error_type`.",
        fields=("error_type", "error", "retry_in"),
    ),
    Event(
        "clerk.converse_receive_abandoned",
        ("warning",),
        "At a stop, the long poll under way did not return within its wait and margin and was "
        "cancelled; what it may have taken comes back after the visibility timeout.",
        "None for one. If it repeats, the endpoint hangs on receives: check the network path "
        "to SQS.",
        fields=("waited",),
    ),
    Event(
        "clerk.converse_command_rejected",
        ("warning",),
        "A message that is not a valid converse command, whose `command_id` the ledger "
        "holds for another message (`command_id reused for a different message`), or whose "
        "message cannot fit the model's context window (`message is larger than the model's "
        "context window: …`, sizes only) was sent to the dead-letter queue with its `reason` "
        "and deleted; it is never retried.",
        "`worker dlq inspect` counts the dead-letter queue by reason: fix the producer. Once "
        "the cause is fixed (e.g. a bucket setting), `worker dlq redrive --include-rejected` "
        "sends them back. A reused `command_id` is rejected again: the producer sends that "
        "question anew under a new id. A message over the context window is rejected again "
        "unless the model takes more than the stage was told (MODEL_ID, "
        "MODEL_CONTEXT_TOKENS): counsel splits the question, or the setting is corrected.",
        fields=("reason",),
    ),
    Event(
        "clerk.converse_dead_letter_failed",
        FAILURE,
        "A rejected command could not be sent to the dead-letter queue; it is not deleted, "
        "so it comes back and is rejected again.",
        "Check that the dead-letter queue exists and that the role may call sqs:SendMessage "
        "on it (and s3:PutObject on PAYLOAD_BUCKET, for a body over the inline limit).",
        fields=("error_type", "error"),
    ),
    Event(
        "clerk.converse_delete_failed",
        FAILURE,
        "A delete of finished messages failed, or SQS refused an entry (`code`); the message "
        "comes back after its visibility timeout and, its command done, is deleted without a "
        "second forward.",
        "Transient failures need nothing. If it repeats, check that the role may call "
        "sqs:DeleteMessage; stale receipt handles mean turns outlive the visibility timeout.",
        fields=("error_type", "error", "count", "message_id", "code"),
    ),
    Event(
        "clerk.converse_retry_failed",
        FAILURE,
        "A message to retry could not be given its backoff delay; it comes back after its "
        "current visibility timeout instead.",
        "None for one. If it repeats, check that the role may call sqs:ChangeMessageVisibility.",
        fields=("error_type", "error", "count", "message_id", "code"),
    ),
    Event(
        "clerk.converse_release_failed",
        FAILURE,
        "Messages this worker gave up could not be made visible at once; they come back after "
        "their visibility timeout, later but not lost.",
        "None for one. If it repeats, check that the role may call sqs:ChangeMessageVisibility.",
        fields=("error_type", "error", "count", "message_id", "code"),
    ),
    Event(
        "clerk.converse_outcome_failed",
        FAILURE,
        "Acting on a turn's outcome (delete, dead-letter, retry) raised; the message comes "
        "back after its visibility timeout and the ledger keeps a served command from being "
        "forwarded again.",
        "A warning names the failed call: check SQS. An error is a defect: report it with its "
        "`error_type`.",
        fields=("error_type", "error"),
    ),
    Event(
        "clerk.converse_batcher_failed",
        ("error",),
        "A batcher (`batcher`: `delete-batch`, `done-marks`, or `send-batch:` and a queue's "
        "name) failed on its own; the batch's items fail back to their turns and it carries "
        "on after a backoff.",
        "A defect: report it with `error_type`. The turns concerned are retried or come back "
        "by themselves.",
        fields=("batcher", "error_type", "count"),
    ),
    # Leases.
    Event(
        "clerk.converse_heartbeat_failed",
        FAILURE,
        "A beat of the lease heartbeat (extend visibilities, renew command leases) raised; "
        "the next beat comes on time.",
        "If it repeats, leases may lapse and commands be received twice: check DynamoDB and "
        "SQS; an error-level line is a defect to report with its `error_type`.",
        fields=("error_type", "error"),
    ),
    Event(
        "clerk.converse_lease_extend_failed",
        FAILURE,
        "The visibility of messages in hand could not be extended (the call failed, or SQS "
        "refused an entry: `code`); a stale receipt handle is dropped from the lease book.",
        "None for one: the next beat tries again. If it repeats, check SQS; a message whose "
        "visibility lapses is received again and finds its command's lease held.",
        fields=("error_type", "error", "count", "message_id", "code"),
    ),
    Event(
        "clerk.converse_lease_cap_reached",
        ("warning",),
        "A message has been handled for LEASE_MAX_SECONDS; its visibility is no longer "
        "extended, so it becomes visible and can be received again.",
        "Find what holds the turn so long: usually a dependency outage "
        "(`clerk.converse_dependency_failing`). Raise LEASE_MAX_SECONDS only for turns that "
        "are slow by nature.",
        fields=("message_id", "lease_max_seconds"),
    ),
    Event(
        "clerk.converse_lease_renew_failed",
        ("warning",),
        "A command's lease in the history table could not be renewed; the next beat tries again.",
        "None for one. If it repeats, check DynamoDB (`error` names the operation and code): "
        "a lease that runs out can be taken over by another worker.",
        fields=("error",),
    ),
    Event(
        "clerk.converse_command_lease_lost",
        ("warning",),
        "A command in hand is no longer this worker's in the history table: its lease ran out "
        "and another worker may have taken it over.",
        "The command may be forwarded twice (a FIFO model queue drops the second within its "
        "deduplication window). If it repeats, turns outlive their lease: check "
        "`clerk.converse_lease_renew_failed` and DynamoDB.",
        fields=("message_id",),
    ),
    # A dependency failing for everyone.
    Event(
        "clerk.converse_dependency_failing",
        ("warning",),
        "DynamoDB or the model queue's sends failed three turns in a row: the worker stops "
        "receiving, holds the failed turns (their visibility kept) and probes.",
        "Check the `dependency` named (`kind`: throttled, server, connection, refused): "
        "capacity, a hot partition, an AWS event, the network. The worker resumes by itself; "
        "held commands spend no receive.",
        fields=("dependency", "kind", "failures", "probe_in"),
    ),
    Event(
        "clerk.converse_dependency_probe_failed",
        ("info",),
        "A probe of a failing dependency failed; the next one is further off.",
        "Nothing beyond `clerk.converse_dependency_failing`: the worker keeps probing.",
        fields=("dependency", "kind", "probes", "probe_in"),
    ),
    Event(
        "clerk.converse_dependency_recovered",
        ("info",),
        "A probe or a turn succeeded: the held turns run again and receiving resumes.",
        fields=("dependency", "failing_seconds", "probes", "held"),
    ),
    # One command's turn.
    Event(
        "clerk.converse_command_retry",
        ("warning",),
        "A turn failed for a passing reason (`error`: operation and code); the message goes "
        "back to the queue with a backoff by receive count.",
        "Transient failures need nothing. If one command keeps failing it reaches the "
        "dead-letter queue as retry-exhausted: fix the cause `error` names, then "
        "`worker dlq redrive`.",
        fields=("error",),
    ),
    Event(
        "clerk.converse_payload_access_denied",
        ("error",),
        "S3 refused (HTTP 403) to read the object an inbound pointer names; the command is "
        "retried.",
        "Grant the task role s3:GetObject on the bucket's objects and s3:ListBucket on the "
        "`bucket` (or fix its policy); commands that ran out of receives meanwhile: "
        "`worker dlq redrive`.",
        fields=("bucket", "code", "hint"),
    ),
    Event(
        "clerk.converse_command_duplicate",
        ("info",),
        "A command already forwarded was delivered again (the same `command_id` and message, "
        "or a record too old to hold the message's digest): deleted without a second forward.",
    ),
    Event(
        "clerk.converse_command_in_progress_elsewhere",
        ("info",),
        "Another worker holds the command's live lease: the message is left for later.",
    ),
    Event(
        "clerk.converse_command_failed",
        ("error",),
        "A turn raised an unexpected exception (a defect), logged by its type and `where` it "
        "was raised (file, line, function; never its text). The message comes back alone, "
        "after the usual backoff: the other commands are not slowed.",
        "Report it with `error_type` and `where`. On its last receive the command is "
        "dead-lettered with them as its `LastFailure` "
        "(`clerk.converse_command_retries_exhausted`): `worker dlq redrive` once the defect "
        "is fixed.",
        fields=("error_type", "where"),
    ),
    Event(
        "clerk.converse_command_retries_exhausted",
        ("warning",),
        "A command failed on its last receive (the converse queue's `maxReceiveCount`): a "
        "dependency's failure or a defect. The stage sent it to the dead-letter queue itself, "
        "with `error` as its `LastFailure`, instead of leaving SQS to move it without one.",
        "Fix what `error` names (an operation and its code, or a defect's type and place), "
        "then `worker dlq redrive` sends it back.",
        fields=("error",),
    ),
    Event(
        "clerk.converse_history_entries_dropped",
        ("warning",),
        "Malformed history items (a missing or unknown role, content not a string) were left "
        "out of the window, counted by `reasons`.",
        "The history writer stored a malformed item: find it by `conversation_id` and fix "
        "the writer.",
        fields=("count", "reasons"),
    ),
    Event(
        "clerk.converse_bill_dropped",
        ("warning",),
        "An answer's stored bill (`model_usage`, at `seq`) is malformed: `attribute` and "
        "`reason` say how (docs/reference/stored-items.md). It was dropped whole, and the turn "
        "went on as if that answer had no bill.",
        "Fix the model stage's writer of `model_usage`; `worker bill --conversation ID` lists "
        "the bills dropped.",
        fields=("seq", "attribute", "reason"),
    ),
    Event(
        "clerk.converse_stored_attribute_ignored",
        ("warning",),
        "A stored attribute that may be absent is malformed (`attribute`, `reason`; on a "
        "message at `seq`, or on the `state` item): the turn was served reading it as absent, "
        "the safe reading docs/reference/stored-items.md gives for it.",
        "Fix the writer named for the attribute in docs/reference/stored-items.md; the stage's "
        "own marks repair themselves at the next write.",
        fields=("attribute", "reason", "seq", "item"),
    ),
    Event(
        "clerk.converse_sent_at_ignored",
        ("warning",),
        "The command's `sent_at` is not an RFC 3339 time with a zone within the stage's range "
        "(`reason`): the receive time stood in for it.",
        "Fix the producer's clock or its spelling of `sent_at`.",
        fields=("reason",),
    ),
    Event(
        "clerk.converse_history_window_bounded",
        ("info",),
        "The window dropped older messages, or the turn read past its first page: what it "
        "kept, dropped and trimmed, and its token estimate.",
        fields=(
            "dropped",
            "kept",
            "trimmed",
            "estimated_tokens",
            "floor_overrode_budget",
            "extra_queries",
            "anchor",
            "anchor_reason",
        ),
    ),
    Event(
        "clerk.converse_history_fold_gap",
        ("warning",),
        "Messages the fold has not absorbed fell outside the window (`first_seq` to "
        "`last_seq`): context held by neither window nor fold.",
        "The compactor is lagging: check its health and the compaction queue's backlog and "
        "dead-letter queue (docs/FOLD.md).",
        fields=("unfolded_dropped", "first_seq", "last_seq"),
    ),
    Event(
        "clerk.converse_messages_left_out",
        ("info",),
        "Window messages with no block in the Converse view (`reasons`: blank, leading_answer).",
        fields=("count", "reasons"),
    ),
    Event(
        "clerk.converse_window_anchor",
        ("info",),
        "Every turn of the cache-aligned mode: the anchor kept, re-anchored (and why) or "
        "fallen back, the summary shown, and each cache point's TTL and why.",
        fields=(
            "outcome",
            "reason",
            "anchor_seq",
            "anchor_folded_through",
            "stored_seq",
            "stored_folded_through",
            "write",
            "summary_folded_through",
            "summary_behind",
            "snapshot",
            "ttls",
            "ttl_why",
            "pace_gaps",
            "pace_newest_gap_s",
            "pace_p5",
            "pace_p60",
            "expected_read",
        ),
    ),
    Event(
        "clerk.converse_prompt_forwarded",
        ("info",),
        "The prompt payload was sent to the model queue: messages kept, estimated tokens and "
        "the body's size in bytes.",
        fields=("kept", "estimated_tokens", "body_bytes"),
    ),
    Event(
        "clerk.converse_command_finish_failed",
        ("warning",),
        "The command could not be marked done after its prompt was sent (about 16 s of "
        "tries); the message is still deleted.",
        "Check DynamoDB. Only a redelivery after the lease could forward the command again; "
        "a FIFO model queue drops that within its deduplication window.",
        fields=("error",),
    ),
    Event(
        "clerk.converse_cache_observed",
        ("info", "warning"),
        "The newest answer on the page with a stored bill (`model_usage`), checked against "
        "the `cache` its prompt expected: the read expected (the estimate, and calibrated "
        "to real tokens) and made, the writes by TTL, the input as billed, and a miss's "
        "`cause` (`expired`, `stage_changed_prefix`, `below_minimum`, `ttl_downgraded`, "
        "`unexplained`; null: no miss; `details_known` false: the bill carried no "
        "`cacheDetails`, so no downgrade is inferred), the conversation's token calibration "
        "(its ratio and offset, the bills it rests on, those rejected as outliers, a reset "
        "after the model stage's prefix jumped, its relative error), the offset of the model "
        "stage's clock from the producers' (`clock_offset_s`, from the conversation's own "
        "timeline), the model's minimum as the bills show it (`min_raised` when a point that "
        "reached the configured one wrote nothing; `spaced` when a later point needed more), "
        "and the prefixes alive at this command's `sent_at`. Logged once the prompt is out: "
        "each answer is checked once, by the turn after it. A warning when the miss is "
        "`unexplained`.",
        "None for one `unexplained` miss (an entry evicted early). Many: the model stage's "
        "system prompt, tools or model changed (every prefix then misses), or Bedrock's "
        "cache rules moved; compare `worker bill --conversation ID` before and after.",
        fields=(
            "answer_seq",
            "answer_command_id",
            "expected_read",
            "expected_read_tokens",
            "read_tokens",
            "write_tokens",
            "written_5m",
            "written_1h",
            "billed_units",
            "cause",
            "downgraded",
            "calibration_ratio",
            "calibration_offset",
            "calibration_samples",
            "details_known",
            "calibration_rejected",
            "calibration_reset",
            "calibration_error",
            "clock_offset_s",
            "min_tokens",
            "min_raised",
            "spaced",
            "alive",
            "cold",
        ),
    ),
    Event(
        "clerk.converse_window_anchor_write_failed",
        FAILURE,
        "The cache-aligned window's new anchor could not be stored; the turn is done, and "
        "the next one re-anchors.",
        "None for one (it costs cache reads, not correctness). If it repeats, check DynamoDB; "
        "an error-level line is a defect to report with its `error_type`.",
        fields=("error_type", "error", "anchor_seq", "anchor_folded_through"),
    ),
    Event(
        "clerk.converse_compaction_requested",
        ("info",),
        "A fold request was sent to the compaction queue for `folded_through` to `through`.",
        fields=("folded_through", "through", "unfolded_tokens"),
    ),
    Event(
        "clerk.converse_compaction_request_failed",
        ("warning",),
        "A due fold request could not be claimed or sent; the next turn of the conversation "
        "asks again.",
        "None for one. If it repeats, check the compaction queue and DynamoDB (`error`); "
        "watch `clerk.converse_history_fold_gap`.",
        fields=("error",),
    ),
    # Operating it.
    Event(
        "clerk.converse_metrics_flush_failed",
        FAILURE,
        "EMF metric documents could not be built or written to stdout; turns carry on, and "
        "documents not written are tried again at the next flush (the oldest dropped past a "
        "bound).",
        "Check the log driver reading stdout; meanwhile the stage's metrics and alarms go "
        "stale (the liveness alarm treats missing data as breaching).",
        fields=("error_type", "error", "held_documents", "dropped_documents"),
    ),
    Event(
        "clerk.converse_health_write_failed",
        FAILURE,
        "The health file could not be written (a full or read-only disk); `worker health` "
        "fails once the file is stale, and the platform replaces the task.",
        "Give HEALTH_FILE a writable place (with a read-only root filesystem, a volume on the "
        "temp directory).",
        fields=("error_type", "error"),
    ),
)

#: :data:`EVENTS` by name.
EVENTS_BY_NAME: Mapping[str, Event] = MappingProxyType({event.name: event for event in EVENTS})

#: A standard-library record (botocore, asyncio, Python warnings), written by ``worker.logs``
#: in the same stream with its text left out.
LIBRARY = Event(
    "library.log",
    ("warning", "error", "critical"),
    "A library logged at WARNING or above: its logger, the source line and, where they "
    "apply, the message template, the exception type and the warning category; never its "
    "text or arguments.",
    "Look the `source` line up in the library; a recurring one may point at a "
    "misconfiguration (credentials, endpoint, TLS).",
    fields=("logger", "source", "message_template", "exc_type", "warning_category"),
)
