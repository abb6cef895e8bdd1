"""docs/SCALING.md: the capacity model, written from a ``make bench`` run's results.

Every figure in it is either a row of that run (docs/BENCHMARKS.md, part 2, 1b, 3b and 4),
a value of the deployment files (infra/), a stated assumption, or a published AWS limit
named with its source. The model's arithmetic lives here, so the document and the run it
cites never disagree::

    .venv/bin/python -m bench.reports.scaling docs/benchmarks/results.json docs/SCALING.md

(``make bench`` writes it after docs/BENCHMARKS.md; a quick run writes .bench/quick/.)
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
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


def _n(x: float) -> str:
    if isinstance(x, int):
        return f"{x:,}"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:,.1f}" if x >= 10 else f"{x:,.2f}"


def markdown(doc: dict[str, Any], results_path: str) -> str:
    deploy = deployment()
    m = model(doc, deploy)
    far = doc["throughput_delayed"]
    trips = far["round_trips"]
    today = m.per_task
    loads = {"today (×1)": today, "×10": 10 * today, "×100": 100 * today, "×1000": 1000 * today}
    quick = " **(a quick run: few commands, noisy; `make bench` writes the full figures)**"
    derived_target = ACCEPTABLE_WAIT_SECONDS * m.per_task
    implied_wait = deploy["backlog_target"] / m.per_task
    lines = [
        "<!-- generated by bench/reports/scaling.py from a make bench run; edit the script, "
        "not this "
        "file -->",
        "",
        "# Scaling the converse stage: one task's capacity, tasks per arrival rate, and the "
        "AWS limits that bind first",
        "",
        f"From the run of {doc['measured_at']} (`{doc['command']}`, figures in "
        f"`{results_path}`, tables in `{Path(results_path).parent.parent / 'BENCHMARKS.md'}`)"
        + (quick if doc.get("quick") else "")
        + ", the deployment files in `infra/`, and the AWS limits cited in section 4. Every "
        "figure below is one of those, or arithmetic on them shown where it is made; "
        "assumptions are marked *(assumption)*.",
        "",
        "## 1. What one task does",
        "",
        f"Measured with a network round trip injected per request (SQS {trips['sqs_ms']:g} ms, "
        f"DynamoDB {trips['dynamodb_ms']:g} ms: docs/BENCHMARKS.md part 3b), worker "
        f"concurrency {far['concurrency']}:",
        "",
        "| row (part 3b) | commands/s | per process | worker CPU ms / command | AWS calls / "
        "command |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| one worker process | {_n(m.rate_one)} | {_n(m.rate_one)} | {m.cpu_ms:.2f} "
        f"| {m.calls:.2f} |",
    ]
    if m.rate_two is not None and m.cpu_ms_x2 is not None:
        two = far["summary"]["worker-x2"]
        lines.append(
            f"| two worker processes, one stack | {_n(m.rate_two)} | {_n(m.rate_two / 2)} "
            f"| {m.cpu_ms_x2:.2f} | {sum(two['calls_per_command'].values()):.2f} |"
        )
    cores = doc["machine"]["cores"]
    lines += [
        "",
        f"The commands per second are this machine's: {cores} cores shared by the worker(s), "
        "moto, dynalite, the latency proxy and the benchmark's own feed and drain, so the "
        "rate of one process is not a task's capacity. What carries over to a task is what "
        "a command costs: **CPU per command** (the worker's own, measured in its process) "
        "and **calls per command**; and how long a command holds one of the task's slots. "
        + _two_processes(m, far["summary"])
        + " Tasks with their own vCPU add capacity linearly until a shared limit (section 4) "
        "binds: the stage shares no state between tasks but the queues and the table.",
        "",
        "One task's capacity is the lower of two bounds:",
        "",
        f"- **CPU.** A task of `TaskCpu` {deploy['task_cpu']} is {m.vcpu:g} vCPU "
        f"(`infra/cloudformation/converse-stage.yaml`; the Kubernetes Deployment requests "
        f"500m). Taking one vCPU as one core of this machine *(assumption)* and planning "
        f"{UTILISATION:.0%} of it *(assumption: headroom for bursts and logging spikes)*: "
        f"{m.vcpu:g} × {UTILISATION:g} × 1000 / {m.cpu_ms:.2f} ms = "
        f"**{_n(m.cpu_bound)} commands/s**.",
        f"- **Slots.** `WORKER_CONCURRENCY` {m.concurrency} (the template's and ConfigMap's "
        "default) commands at once, each holding its slot from the receive to its done mark: "
        f"the worker's p50 send → arrival at the higher load of part 4 (with latency), plus "
        f"the rest of the send's round trip and the done mark's = {m.slot_seconds * 1000:.0f} "
        f"ms *(an estimate from those rows)*; {m.concurrency} / {m.slot_seconds:.3f} s = "
        f"**{_n(m.slot_bound)} commands/s**.",
        "",
        f"So **μ = {_n(m.per_task)} commands/s per task** "
        f"({'CPU' if m.cpu_bound <= m.slot_bound else 'slots'}-bound). On a CPU-bound task "
        "more concurrency buys nothing; on a slot-bound one, raise `WORKER_CONCURRENCY` "
        "before adding tasks.",
        "",
        "## 2. Tasks for an arrival rate",
        "",
        "N(λ) = ⌈λ / μ⌉. No production arrival rate is recorded in this repository, so "
        "*today* is taken as the load the default stack holds at rest *(assumption)*: one "
        f"task (`MinTasks` {deploy['min_tasks']}) at μ, λ₀ = {_n(today)} commands/s.",
        "",
        "| load | commands/s | tasks | vCPU | AWS calls/s (all) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, rate in loads.items():
        tasks = m.tasks(rate)
        lines.append(
            f"| {name} | {_n(rate)} | {tasks:,} | {tasks * m.vcpu:,.1f} | {_n(rate * m.calls)} |"
        )
    lines += [
        "",
        f"`MaxTasks` is {deploy['max_tasks']} (KEDA `maxReplicaCount` {deploy['keda_max']}): "
        f"enough for ×10, not for ×100 or more, where it is the first limit to bind (it is "
        "ours; raise it together with the account's Fargate vCPU quota, below).",
        "",
        "## 3. The autoscaling target: backlog per task",
        "",
        "Both platforms scale on visible converse commands per running task "
        "(CloudFormation: target tracking on `ApproximateNumberOfMessagesVisible` / "
        "`RunningTaskCount`; KEDA: `aws-sqs-queue` with `scaleOnInFlight: false`, which runs "
        "⌈visible / `queueLength`⌉ replicas). AWS's rule for the target (*Amazon EC2 Auto "
        'Scaling User Guide*, "Scaling policy based on Amazon SQS"): backlog per instance = '
        "acceptable latency / average processing time per message, and the processing time "
        "per message of a task at full load is 1/μ.",
        "",
        f"- Acceptable queueing at a burst: {ACCEPTABLE_WAIT_SECONDS:g} s *(assumption: "
        "counsel waits for the answer, and the model call itself takes seconds)*. Derived "
        f"target: {ACCEPTABLE_WAIT_SECONDS:g} s × {_n(m.per_task)}/s = "
        f"**{_n(derived_target)} commands per task**.",
        f"- Configured: `BacklogPerTaskTarget` {deploy['backlog_target']} "
        f"(CloudFormation) and `queueLength` {deploy['keda_queue_length']} (KEDA) "
        + (
            "— the same number on both platforms, "
            if deploy["backlog_target"] == deploy["keda_queue_length"]
            else "— **they differ: set them together**, "
        )
        + f"a backlog a task clears in {implied_wait:.1f} s at μ. "
        + (
            "That is within a factor of two of the derived target, so the defaults stand: "
            "they scale out a little earlier than the rule asks, which costs a task now and "
            "then and buys the time a new task takes to start."
            if 0.5 <= deploy["backlog_target"] / derived_target <= 2
            else (
                "That is well below the derived target: the defaults scale out earlier "
                "than needed (more tasks than the rule asks). Raise both to about "
                f"{_n(derived_target)} if the cost matters more than the margin."
                if deploy["backlog_target"] < derived_target
                else "That is above the derived target: commands would queue longer than "
                f"{ACCEPTABLE_WAIT_SECONDS:g} s before a task is added. Lower both to about "
                f"{_n(derived_target)}."
            )
        ),
        "- How fast they react differs, and that is by platform, not by number: KEDA reads "
        f"the queue every {deploy['keda_polling']} s (`pollingInterval`); ECS target "
        "tracking acts on CloudWatch alarms over SQS's one-minute metrics (AWS documents "
        "several consecutive one-minute datapoints before a scale-out), then the scale-out "
        f"cooldown ({deploy['scale_out_cooldown']} s). A burst above the running tasks' "
        "capacity therefore queues for minutes on ECS before new tasks serve it; keep "
        "`MinTasks` at the steady peak, not at the trough, where minutes of queueing matter.",
        "",
        "## 4. The AWS limits that bind first, at ×10 and ×1000",
        "",
        *_limits(m, deploy, loads),
        "",
        "## 5. What is not modelled",
        "",
        "- Fargate vCPU against this machine's cores (taken 1:1), and the CPU of the real "
        "endpoints' TLS (the benchmark's connections are plain HTTP on loopback).",
        "- The other stages' load on the same table and queues: the writer's message "
        "appends and the compactor's folds write to the same partitions; the model stage "
        "reads the model queue.",
        "- Bursts shorter than the autoscaler's reaction time (section 3): only `MinTasks` "
        "and `WORKER_CONCURRENCY` absorb them.",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Limit:
    resource: str
    limit: str  # the limit and its source
    at_ten: str
    at_thousand: str
    binds_at: float  # commands/s at which it binds (inf: never)
    binds_at_text: str
    design: str


def _two_processes(m: Model, far: dict[str, Any]) -> str:
    """What the two-process row says, in words that follow its figures."""
    two = far.get("worker-x2")
    if two is None or m.cpu_ms_x2 is None or m.rate_two is None:
        return ""
    calls_two = sum(two["calls_per_command"].values())
    cpu = m.cpu_ms_x2 / m.cpu_ms - 1
    calls = calls_two / m.calls - 1
    said = [
        f"Two processes on one stack served every command once ({two['duplicates']} "
        f"duplicates), at {_n(m.rate_two)} commands/s together against {_n(m.rate_one)} for "
        "one: on this machine the shared servers and cores, not the workers, set that pace."
    ]
    if abs(cpu) <= 0.1:
        said.append(f"Their CPU per command was the same as one's ({cpu:+.0%}).")
    else:
        said.append(
            f"Their CPU per command was {cpu:+.0%} against one's: more processes than "
            "cores here, so each ran among more competitors (CPU time per unit of work "
            "grows with contention for cores and caches: the likely cause); the one-process "
            "figure is the one a task with its own vCPU pays."
        )
    if abs(calls) > 0.03:
        said.append(
            f"Calls per command were {calls:+.0%}: with the flow split between two "
            "processes each receive brought fewer messages, so batches were less full. "
            "The same happens with more tasks than a load needs, one reason not to run the "
            "autoscaler's target too low."
        )
    return " ".join(said)


def _limits(m: Model, deploy: dict[str, Any], loads: dict[str, float]) -> list[str]:
    ten, thousand = loads["×10"], loads["×1000"]

    def cite(key: str) -> str:
        return LIMITS[key][1]

    def value(key: str) -> float:
        return LIMITS[key][0]

    def use(load: float, limit: float, unit: str) -> str:
        share = load / limit
        flag = " **over**" if share > 1 else ""
        return f"{_n(load)} {unit} ({100 * share:,.0f}% of the limit){flag}"

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
              f"{_n(ten * 0.2)} calls/s", f"{_n(thousand * 0.2)} calls/s", inf, "never",
              "receives and deletes in batches of ten: about 0.2 calls per command"),
        Limit("Converse queue: messages in flight",
              f"{value('sqs_standard_inflight'):,.0f} ({cite('sqs_standard_inflight')})",
              use(m.tasks(ten) * m.concurrency, value("sqs_standard_inflight"), "messages"),
              use(m.tasks(thousand) * m.concurrency, value("sqs_standard_inflight"),
                  "messages"),
              value("sqs_standard_inflight") / inflight_per_command,
              f"{_n(value('sqs_standard_inflight') / inflight_per_command)} commands/s "
              f"({value('sqs_standard_inflight') / m.concurrency:,.0f} tasks)",
              "in flight = tasks × `WORKER_CONCURRENCY`: a task holds no more than its slots; "
              "past the quota, SQS refuses receives (OverLimit) until messages are deleted"),
        Limit("Model queue, if FIFO (`worker bootstrap --fifo-model-queue`): sends",
              f"{value('sqs_fifo_calls'):g} calls/s per action ({cite('sqs_fifo_calls')})",
              use(ten * m.sends, value("sqs_fifo_calls"), "calls/s"),
              use(thousand * m.sends, value("sqs_fifo_calls"), "calls/s"),
              fifo_ceiling, f"{_n(fifo_ceiling)} commands/s",
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
        Limit("History table: one conversation's partition",
              f"{value('ddb_partition_rcu'):,.0f} RCU and {value('ddb_partition_wcu'):,.0f} "
              f"WCU per second ({cite('ddb_partition_rcu')}; {cite('ddb_partition_wcu')})",
              "a person's pace", "a person's pace", inf,
              f"{_n(per_conversation)} turns/s on one conversation",
              f"a turn reads one page ({m.rcu_per_turn:g} RCU at most in part 2, strongly "
              "consistent) and writes two ledger records (1 WCU each, under 1 KB) in the "
              "conversation's own partition; a person asks once in seconds. A client looping "
              "on one conversation is throttled, and a throttle is a retryable error: back "
              "to the queue with backoff"),
        Limit("History table: reads",
              f"{value('ddb_table_rru'):,.0f} RRU/s ({cite('ddb_table_rru')})",
              use(ten * m.rcu_per_turn, value("ddb_table_rru"), "RRU/s"),
              use(thousand * m.rcu_per_turn, value("ddb_table_rru"), "RRU/s"),
              rru_ceiling, f"{_n(rru_ceiling)} commands/s",
              f"{m.rcu_per_turn:g} read units a turn at most (part 2): one page, whatever "
              "the conversation's length. Past the quota: raise it (adjustable), or read the "
              "page eventually consistent (half the units, but the writer's last append "
              "could be missed for a moment: not without the writer stage's agreement)"),
        Limit("History table: writes (this stage's)",
              f"{value('ddb_table_wru'):,.0f} WRU/s ({cite('ddb_table_wru')})",
              use(ten * 2, value("ddb_table_wru"), "WRU/s"),
              use(thousand * 2, value("ddb_table_wru"), "WRU/s"),
              wru_ceiling, f"{_n(wru_ceiling)} commands/s",
              "two ledger writes a command (the claim and the done mark; batching the marks "
              "saves calls, not write units); the writer's appends come on top"),
        Limit("Payload bucket (S3): offloaded prompts",
              f"{value('s3_put_per_prefix'):,.0f} PUT/s and {value('s3_get_per_prefix'):,.0f} "
              f"GET/s per prefix ({cite('s3_put_per_prefix')})",
              f"{_n(ten * m.offloaded)} PUT/s", f"{_n(thousand * m.offloaded)} PUT/s",
              s3_ceiling,
              f"{_n(s3_ceiling)} commands/s" if m.offloaded else "never in this workload",
              f"{100 * m.offloaded:.1f}% of the workload's prompts are over the inline limit "
              "(part 1b); at a share f, one prefix takes 3,500 / f commands/s. Keys are "
              "`payloads/<sha256>.json`: the hash right after the prefix lets S3 split it as "
              "the rate grows, and a `SlowDown` (503) meanwhile is a retryable error"),
        Limit("ECS service",
              f"`MaxTasks` {deploy['max_tasks']} (ours); "
              f"{value('ecs_tasks_per_service'):,.0f} tasks per service "
              f"({cite('ecs_tasks_per_service')}); the account's Fargate vCPU quota "
              "(Service Quotas, account-specific)",
              use(m.tasks(ten), deploy["max_tasks"], "tasks"),
              use(m.tasks(thousand), deploy["max_tasks"], "tasks"),
              tasks_ceiling, f"{_n(tasks_ceiling)} commands/s (`MaxTasks`)",
              "raise `MaxTasks` and KEDA's `maxReplicaCount` together, and the vCPU quota; "
              "tasks add capacity linearly (section 1)"),
    ]  # fmt: skip
    lines = [
        f"At ×10 ({_n(ten)} commands/s) and ×1000 ({_n(thousand)} commands/s), with the "
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
            ", ".join(f"{x.resource} (from {_n(x.binds_at)} commands/s)" for x in at_ten) + " bind."
            if at_ten
            else "nothing binds: standard queues, one page a turn and the default task "
            f"ceiling all have room (the nearest: {order[0].resource}, at "
            f"{_n(order[0].binds_at)} commands/s)."
        ),
        "- **At ×1000**, in the order they bind: "
        + "; ".join(f"{x.resource} from {_n(x.binds_at)} commands/s" for x in at_thousand)
        + ". None is a per-conversation limit: a conversation goes at one person's pace, "
        "so the partition and message-group limits stay far away. What binds is aggregate, "
        "and each is a setting of ours or an adjustable quota.",
        "- The limits are quoted from AWS's documentation as known when this was written "
        "(this machine has no network, so none was re-read); check the current quota pages "
        "before planning on them, FIFO high throughput and in-flight quotas especially, "
        "which AWS has raised over time.",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m bench.reports.scaling RESULTS.json OUT.md", file=sys.stderr)
        return 2
    results, out = Path(args[0]), Path(args[1])
    doc = json.loads(results.read_text(encoding="utf-8"))
    try:
        shown = results.resolve().relative_to(REPO_ROOT)
    except ValueError:
        shown = results
    out.write_text(markdown(doc, str(shown)), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
