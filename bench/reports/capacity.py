"""docs/SCALING.md's arithmetic: one task's capacity from a run's figures and the deployment
files, and the published AWS limits it meets (:mod:`bench.reports.scaling` writes the page).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cfnlint.decode import cfn_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = REPO_ROOT / "infra" / "cloudformation" / "converse-stage.yaml"
KEDA = REPO_ROOT / "infra" / "k8s" / "keda-scaledobject.yaml"

#: Assumptions, stated in the document where they are used.
UTILISATION = 0.7  # of a task's vCPU the model plans to use: headroom for bursts
ACCEPTABLE_WAIT_SECONDS = 2.0  # queueing a counsel's question may wait at a burst
VCPU_PER_CORE = 1.0  # one Fargate vCPU taken as one core of the benchmark machine

#: Published AWS limits: (value, where AWS states it). Quoted from the documentation as
#: known when written; this machine has no network, so none was re-read for this file.
LIMITS: dict[str, tuple[float, str]] = {
    "sqs_standard_inflight": (
        120_000,
        '*Amazon SQS Developer Guide*, "Amazon SQS quotas": about 120,000 in-flight '
        "messages per standard queue",
    ),
    "sqs_fifo_calls": (
        300,
        '*Amazon SQS Developer Guide*, "Amazon SQS quotas" / "FIFO queues": 300 API '
        "calls per second per action (send, receive, delete) without high throughput mode; "
        "a batch of 10 counts once, so 3,000 messages per second",
    ),
    "ddb_partition_rcu": (
        3_000,
        "*Amazon DynamoDB Developer Guide*, partition key design / burst and adaptive "
        "capacity: one partition serves at most 3,000 read units per second",
    ),
    "ddb_partition_wcu": (
        1_000,
        "same source: at most 1,000 write units per second per partition",
    ),
    "ddb_table_rru": (
        40_000,
        '*Amazon DynamoDB Developer Guide*, "Service, account, and table quotas": '
        "40,000 read request units per second per on-demand table by default (adjustable)",
    ),
    "ddb_table_wru": (
        40_000,
        "same source: 40,000 write request units per second per on-demand table by "
        "default (adjustable)",
    ),
    "s3_put_per_prefix": (
        3_500,
        '*Amazon S3 User Guide*, "Best practices design patterns: optimizing Amazon S3 '
        'performance": 3,500 PUT/COPY/POST/DELETE per second per partitioned prefix',
    ),
    "s3_get_per_prefix": (
        5_500,
        "same source: 5,500 GET/HEAD per second per partitioned prefix",
    ),
    "ecs_tasks_per_service": (
        5_000,
        '*Amazon ECS Developer Guide*, "Amazon ECS service quotas": 5,000 tasks per service',
    ),
}


def deployment() -> dict[str, Any]:
    """The scaling knobs as the deployment files set them."""
    template = cfn_yaml.load(str(TEMPLATE))  # cfn-lint's loader: short tags in long form
    parameters = template["Parameters"]
    keda = next(
        d
        for d in yaml.safe_load_all(KEDA.read_text(encoding="utf-8"))
        if d and d.get("kind") == "ScaledObject"
    )
    trigger = keda["spec"]["triggers"][0]["metadata"]
    return {
        "task_cpu": int(parameters["TaskCpu"]["Default"]),
        "concurrency": int(parameters["WorkerConcurrency"]["Default"]),
        "min_tasks": int(parameters["MinTasks"]["Default"]),
        "max_tasks": int(parameters["MaxTasks"]["Default"]),
        "backlog_target": int(parameters["BacklogPerTaskTarget"]["Default"]),
        "scale_out_cooldown": int(parameters["ScaleOutCooldownSeconds"]["Default"]),
        "keda_queue_length": int(trigger["queueLength"]),
        "keda_polling": int(keda["spec"]["pollingInterval"]),
        "keda_max": int(keda["spec"]["maxReplicaCount"]),
    }


@dataclass(frozen=True)
class Model:
    """One task's capacity and what a command costs, from the run."""

    cpu_ms: float  # worker ×1 with latency: the worker's CPU per command
    cpu_ms_x2: float | None
    rate_one: float  # worker ×1 with latency, this machine
    rate_two: float | None  # two processes together
    calls: float  # AWS calls per command, worker with latency
    sends: float  # SendMessageBatch per command (model queue)
    slot_seconds: float  # how long a command holds a slot under load (estimate)
    rcu_per_turn: float
    offloaded: float  # share of prompts over the inline limit (S3)
    vcpu: float
    concurrency: int

    @property
    def cpu_bound(self) -> float:
        return self.vcpu * VCPU_PER_CORE * UTILISATION * 1000 / self.cpu_ms

    @property
    def slot_bound(self) -> float:
        return self.concurrency / self.slot_seconds

    @property
    def per_task(self) -> float:
        return min(self.cpu_bound, self.slot_bound)

    def tasks(self, rate: float) -> int:
        return max(1, math.ceil(rate / self.per_task))


def model(doc: dict[str, Any], deploy: dict[str, Any]) -> Model:
    far = doc["throughput_delayed"]["summary"]
    worker = far["worker"]
    two = far.get("worker-x2")
    trips = doc["throughput_delayed"]["round_trips"]
    high = next(
        r
        for r in doc["latency_delayed"]["results"]
        if r["kind"] == "worker" and r["load"] == "high"
    )
    # A slot is held from the receive to the done mark: the measured send → arrival (p50 at
    # the higher load, lingers included), the rest of the send's round trip, the done mark.
    slot = (high["p50_ms"] + trips["sqs_ms"] / 2 + trips["dynamodb_ms"]) / 1000
    full = [r for r in doc["cost"]["rows"] if r["messages"] >= 100]
    sizes = doc["converse_view"]["sizes"]
    ops: dict[str, float] = {}
    for label, n in worker["calls_per_command"].items():
        ops[label.split(" ", 1)[0]] = ops.get(label.split(" ", 1)[0], 0.0) + n
    return Model(
        cpu_ms=worker["cpu_ms_per_command"],
        cpu_ms_x2=two["cpu_ms_per_command"] if two else None,
        rate_one=worker["commands_per_second"],
        rate_two=two["commands_per_second"] if two else None,
        calls=sum(worker["calls_per_command"].values()),
        sends=ops.get("sqs.SendMessageBatch", 0.1),
        slot_seconds=slot,
        rcu_per_turn=max(r["worker"]["capacity_per_turn"] for r in full),
        offloaded=sizes["after"]["over_inline_limit"] / sizes["payloads"],
        vcpu=deploy["task_cpu"] / 1024,
        concurrency=deploy["concurrency"],
    )


def num(x: float) -> str:
    if isinstance(x, int):
        return f"{x:,}"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:,.1f}" if x >= 10 else f"{x:,.2f}"


@dataclass(frozen=True)
class Limit:
    resource: str
    limit: str  # the limit and its source
    at_ten: str
    at_thousand: str
    binds_at: float  # commands/s at which it binds (inf: never)
    binds_at_text: str
    design: str


def limits_section(m: Model, deploy: dict[str, Any], loads: dict[str, float]) -> list[str]:
    ten, thousand = loads["×10"], loads["×1000"]

    def cite(key: str) -> str:
        return LIMITS[key][1]

    def value(key: str) -> float:
        return LIMITS[key][0]

    def use(load: float, limit: float, unit: str) -> str:
        share = load / limit
        flag = " **over**" if share > 1 else ""
        return f"{num(load)} {unit} ({100 * share:,.0f}% of the limit){flag}"

    def at_both(load: Callable[[float], float], limit: float, unit: str) -> tuple[str, str]:
        """The use at ×10 and at ×1000, ``load`` giving the use at a rate of commands."""
        return use(load(ten), limit, unit), use(load(thousand), limit, unit)

    inflight_per_command = m.concurrency / m.per_task  # slots a task holds per command/s
    rru_ceiling = value("ddb_table_rru") / m.rcu_per_turn
    wru_ceiling = value("ddb_table_wru") / 2
    fifo_ceiling = value("sqs_fifo_calls") / m.sends
    tasks_ceiling = deploy["max_tasks"] * m.per_task
    per_conversation = min(
        value("ddb_partition_rcu") / m.rcu_per_turn, value("ddb_partition_wcu") / 2
    )
    s3_ceiling = value("s3_put_per_prefix") / m.offloaded if m.offloaded else math.inf
    inf = math.inf
    limits = [
        Limit("Converse queue (SQS standard): API calls",
              "nearly unlimited API calls per second per action (*Amazon SQS Developer "
              "Guide*, standard queues)",
              f"{num(ten * 0.2)} calls/s", f"{num(thousand * 0.2)} calls/s", inf, "never",
              "receives and deletes in batches of ten: about 0.2 calls per command"),
        Limit("Converse queue: messages in flight",
              f"{value('sqs_standard_inflight'):,.0f} ({cite('sqs_standard_inflight')})",
              *at_both(lambda rate: m.tasks(rate) * m.concurrency,
                       value("sqs_standard_inflight"), "messages"),
              value("sqs_standard_inflight") / inflight_per_command,
              f"{num(value('sqs_standard_inflight') / inflight_per_command)} commands/s "
              f"({value('sqs_standard_inflight') / m.concurrency:,.0f} tasks)",
              "in flight = tasks × `WORKER_CONCURRENCY`: a task holds no more than its slots; "
              "past the quota, SQS refuses receives (OverLimit) until messages are deleted"),
        Limit("Model queue, if FIFO (`worker bootstrap --fifo-model-queue`): sends",
              f"{value('sqs_fifo_calls'):g} calls/s per action ({cite('sqs_fifo_calls')})",
              *at_both(lambda rate: rate * m.sends, value("sqs_fifo_calls"), "calls/s"),
              fifo_ceiling, f"{num(fifo_ceiling)} commands/s",
              f"prompts leave in batches ({m.sends:.2f} SendMessageBatch per command); past "
              "that, the queue's high throughput mode (`FifoThroughputLimit=perMessageGroupId`, "
              "`DeduplicationScope=messageGroup`: a higher quota, per Region), or a standard "
              "model queue with the model stage dropping the rare copy by `command_id` "
              "(docs/RELIABILITY.md). The template's model queue is standard"),
        Limit("Model queue, FIFO: one message group (= one conversation)",
              "messages of a group are delivered in order, one batch in flight per group "
              "(*Amazon SQS Developer Guide*, FIFO message grouping)",
              "a person's pace", "a person's pace", inf, "never for a person",
              "ordering per conversation is what the model stage wants; many conversations "
              "spread over many groups"),
        Limit("History and ledger tables: one conversation's partition",
              f"{value('ddb_partition_rcu'):,.0f} RCU and {value('ddb_partition_wcu'):,.0f} "
              f"WCU per second ({cite('ddb_partition_rcu')}; {cite('ddb_partition_wcu')})",
              "a person's pace", "a person's pace", inf,
              f"{num(per_conversation)} turns/s on one conversation",
              f"a turn reads one page ({m.rcu_per_turn:g} RCU at most in part 2, strongly "
              "consistent) in the conversation's partition of the history table, and writes "
              "two ledger records (1 WCU each, under 1 KB) in its partition of the ledger "
              "table; a person asks once in seconds. A client looping "
              "on one conversation is throttled, and a throttle is a retryable error: back "
              "to the queue with backoff"),
        Limit("History table: reads",
              f"{value('ddb_table_rru'):,.0f} RRU/s ({cite('ddb_table_rru')})",
              *at_both(lambda rate: rate * m.rcu_per_turn, value("ddb_table_rru"), "RRU/s"),
              rru_ceiling, f"{num(rru_ceiling)} commands/s",
              f"{m.rcu_per_turn:g} read units a turn at most (part 2): one page, whatever "
              "the conversation's length. Past the quota: raise it (adjustable), or read the "
              "page eventually consistent (half the units, but the writer's last append "
              "could be missed for a moment: not without the writer stage's agreement)"),
        Limit("Ledger table: writes",
              f"{value('ddb_table_wru'):,.0f} WRU/s ({cite('ddb_table_wru')})",
              *at_both(lambda rate: rate * 2, value("ddb_table_wru"), "WRU/s"),
              wru_ceiling, f"{num(wru_ceiling)} commands/s",
              "two ledger writes a command (the claim and the done mark; batching the marks "
              "saves calls, not write units). The ledger is the stage's own table: the "
              "writer's appends go to the history table, whose quota is its own"),
        Limit("Payload bucket (S3): offloaded prompts",
              f"{value('s3_put_per_prefix'):,.0f} PUT/s and {value('s3_get_per_prefix'):,.0f} "
              f"GET/s per prefix ({cite('s3_put_per_prefix')})",
              f"{num(ten * m.offloaded)} PUT/s", f"{num(thousand * m.offloaded)} PUT/s",
              s3_ceiling,
              f"{num(s3_ceiling)} commands/s" if m.offloaded else "never in this workload",
              f"{100 * m.offloaded:.1f}% of the workload's prompts are over the inline limit "
              "(part 1b); at a share f, one prefix takes 3,500 / f commands/s. Keys are "
              "`payloads/<conversation hash>/<kind>/<sha256>.json`: the hash right after the "
              "prefix lets S3 split it as the rate grows, and a `SlowDown` (503) meanwhile is "
              "a retryable error"),
        Limit("ECS service",
              f"`MaxTasks` {deploy['max_tasks']} (ours); "
              f"{value('ecs_tasks_per_service'):,.0f} tasks per service "
              f"({cite('ecs_tasks_per_service')}); the account's Fargate vCPU quota "
              "(Service Quotas, account-specific)",
              *at_both(m.tasks, deploy["max_tasks"], "tasks"),
              tasks_ceiling, f"{num(tasks_ceiling)} commands/s (`MaxTasks`)",
              "raise `MaxTasks` and KEDA's `maxReplicaCount` together, and the vCPU quota; "
              "tasks add capacity linearly (section 1)"),
    ]  # fmt: skip
    lines = [
        f"At ×10 ({num(ten)} commands/s) and ×1000 ({num(thousand)} commands/s), with the "
        "per-command figures of section 1 (percentages: of the limit in the second column):",
        "",
        "| resource | limit (source) | at ×10 | at ×1000 | binds at | what the design does |",
        "| --- | --- | --- | --- | --- | --- |",
        *(
            f"| {x.resource} | {x.limit} | {x.at_ten} | {x.at_thousand} | {x.binds_at_text} "
            f"| {x.design} |"
            for x in limits
        ),
        "",
    ]
    order = sorted((x for x in limits if x.binds_at < inf), key=lambda x: x.binds_at)
    at_ten = [x for x in order if x.binds_at < ten]
    at_thousand = [x for x in order if x.binds_at < thousand]
    lines += [
        "- **At ×10**: "
        + (
            ", ".join(f"{x.resource} (from {num(x.binds_at)} commands/s)" for x in at_ten)
            + " bind."
            if at_ten
            else "nothing binds: standard queues, one page a turn and the default task "
            f"ceiling all have room (the nearest: {order[0].resource}, at "
            f"{num(order[0].binds_at)} commands/s)."
        ),
        "- **At ×1000**, in the order they bind: "
        + "; ".join(f"{x.resource} from {num(x.binds_at)} commands/s" for x in at_thousand)
        + ". None is a per-conversation limit: a conversation goes at one person's pace, "
        "so the partition and message-group limits stay far away. What binds is aggregate, "
        "and each is a setting of ours or an adjustable quota.",
        "- The limits are quoted from AWS's documentation as known when this was written "
        "(this machine has no network, so none was re-read); check the current quota pages "
        "before planning on them, FIFO high throughput and in-flight quotas especially, "
        "which AWS has raised over time.",
    ]
    return lines
