"""``moto_server`` with werkzeug's per-request log switched off (it costs moto CPU on
every call and nobody reads it), and SendMessageBatch entries keeping their trace header
as SQS's do. Run: ``python -m bench.servers.moto_server -H 127.0.0.1 -p PORT``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from moto.server import main


def batch_entries_keep_their_trace_header(
    set_attribute: Callable[[Any, str, Any], None] = setattr,
) -> None:
    """Keep each SendMessageBatch entry's ``AWSTraceHeader``, as SQS does.

    moto 5.2 keeps ``MessageSystemAttributes`` on SendMessage only and drops them from
    batch entries, and the worker sends its prompts in batches. LocalStack's SQS keeps them
    (``tests/integration/test_localstack.py`` checks it there, unpatched). The tests pass
    ``monkeypatch.setattr``; the benchmark's server patches for good.
    """
    from moto.sqs.models import SQSBackend

    unpatched = SQSBackend.send_message_batch

    def send_message_batch(self: Any, queue_name: str, entries: dict[str, Any]) -> Any:
        messages, failed = unpatched(self, queue_name, entries)
        by_id = {entry["Id"]: entry for entry in entries.values()}
        for message in messages:
            system = by_id[message.user_id].get("MessageSystemAttributes")
            if system:
                message.system_attributes = system
        return messages, failed

    set_attribute(SQSBackend, "send_message_batch", send_message_batch)


if __name__ == "__main__":
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    batch_entries_keep_their_trace_header()
    sys.exit(main(sys.argv[1:]))
