"""Payload throughput: prompts per second for 100 KB (inline) and 1 MB (S3) current
messages, through one worker against a moto server. Run: ``.venv/bin/python -m
bench.parts.payload_bench`` (on its own: ``make bench`` does not run it)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from bench.servers.harness import bootstrap, clients, local_aws, settings_for, worker_running
from worker.app.resources import Resources
from worker.delivery.pointers import pointer_body

SIZES = {"100 KB (inline)": 100_000, "1 MB (via S3)": 1_000_000}


async def measure(label: str, size: int, count: int) -> dict[str, float]:
    async with clients() as aws:
        prefix = "p" + str(size)
        env = await bootstrap(aws, Resources(prefix=prefix))
        message = ("The Buyer may terminate on notice. " * (size // 35 + 1))[:size]
        for start in range(0, count, 10):
            entries = [
                {
                    "Id": str(i),
                    "MessageBody": json.dumps(
                        {
                            "type": "converse",
                            "command_id": f"c-{start + i}",
                            "conversation_id": f"matter-{(start + i) % 8}",
                            "message": message,
                        }
                    ),
                }
                for i in range(min(10, count - start))
            ]
            if size > 262_144:  # commands this large arrive by pointer in production too
                for entry in entries:
                    key = f"in/{entry['Id']}-{start}.json"
                    await aws.s3.put_object(
                        Bucket=env["PAYLOAD_BUCKET"], Key=key, Body=entry["MessageBody"].encode()
                    )
                    entry["MessageBody"] = pointer_body(env["PAYLOAD_BUCKET"], key)
            await aws.sqs.send_message_batch(QueueUrl=env["CONVERSE_QUEUE_URL"], Entries=entries)
        arrived = 0
        started = time.perf_counter()
        async with worker_running(settings_for(env)):
            while arrived < count:
                response = await aws.sqs.receive_message(
                    QueueUrl=env["MODEL_QUEUE_URL"], MaxNumberOfMessages=10, WaitTimeSeconds=1
                )
                batch = response.get("Messages", [])
                arrived += len(batch)
                if batch:
                    await aws.sqs.delete_message_batch(
                        QueueUrl=env["MODEL_QUEUE_URL"],
                        Entries=[
                            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                            for i, m in enumerate(batch)
                        ],
                    )
            elapsed = time.perf_counter() - started
        rate = count / elapsed
        print(f"{label:>18}: {count} prompts in {elapsed:.2f} s = {rate:.1f} prompts/s", flush=True)
        return {"count": count, "seconds": elapsed, "per_second": rate}


async def main_async(count: int) -> dict[str, dict[str, float]]:
    return {label: await measure(label, size, count) for label, size in SIZES.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=40)
    args = parser.parse_args()
    with local_aws():
        asyncio.run(main_async(args.count))


if __name__ == "__main__":
    main()
