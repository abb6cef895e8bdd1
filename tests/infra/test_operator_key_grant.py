"""The operators' key grant that docs/DEPLOY.md gives, as AWS evaluates it: it lets an operator
inspect the dead-letter queues and redrive them to their source queues (each dead letter
re-encrypted there, under that queue's encryption context), and nothing else; and the grant
narrowed to the dead-letter queues alone, the advice it replaces, refuses every redrive.

The statement is read from the page itself, between its marker and the end of its JSON block,
so the page cannot drift from what is tested.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra.iam_policy import Decision, Principal, Request, evaluate
from tests.infra.test_task_role_as_aws_evaluates_it import STACK, WORKER, via

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "DEPLOY.md"
KEY = f"arn:aws:kms:{STACK.region}:{STACK.account}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
OPERATOR = Principal("AWS", f"arn:aws:iam::{STACK.account}:role/mira-operators")
MODEL = WORKER.model_queue
COMPACTION = WORKER.compaction_queue
DEAD_LETTERS = [WORKER.dead_letter_queue, f"{MODEL}-dlq", f"{COMPACTION}-dlq"]
SOURCES = [WORKER.converse_queue, MODEL, COMPACTION]


def documented_grant() -> dict[str, Any]:
    text = DEPLOY.read_text(encoding="utf-8")
    found = re.search(r"<!-- operator-key-grant -->\n```json\n(.*?)\n```", text, re.DOTALL)
    assert found is not None, "DEPLOY.md has no operator key grant"
    return dict(json.loads(found.group(1)))


def on_queue(grant: dict[str, Any], action: str, queue: str, service: str = "sqs") -> Decision:
    context = {**via(service), "kms:EncryptionContext:aws:sqs:arn": queue}
    return evaluate([grant], Request(action, KEY, OPERATOR, context))


def test_the_documented_grant_names_this_stacks_queues() -> None:
    """The example's ARNs are the example stack's (the template's names, resolved)."""
    text = json.dumps(documented_grant())
    for queue in (*DEAD_LETTERS, *SOURCES):
        assert f'"{queue}"' in text


@pytest.mark.parametrize("dead_letters", DEAD_LETTERS)
def test_an_operator_may_inspect_each_dead_letter_queue(dead_letters: str) -> None:
    """``worker dlq inspect`` receives (and releases) the dead letters: a Decrypt each."""
    assert on_queue(documented_grant(), "kms:Decrypt", dead_letters) is Decision.ALLOWED


@pytest.mark.parametrize(("dead_letters", "source"), list(zip(DEAD_LETTERS, SOURCES, strict=True)))
def test_an_operator_may_redrive_each_dead_letter_queue_to_its_source(
    dead_letters: str, source: str
) -> None:
    """A redrive, by ``worker dlq redrive`` or SQS's move task, receives from the dead-letter
    queue and sends to the source queue: SQS asks for a data key (and checks it) under the
    source queue's context."""
    grant = documented_grant()
    assert on_queue(grant, "kms:Decrypt", dead_letters) is Decision.ALLOWED
    assert on_queue(grant, "kms:GenerateDataKey", source) is Decision.ALLOWED
    assert on_queue(grant, "kms:Decrypt", source) is Decision.ALLOWED


def test_narrowed_to_the_dead_letter_queues_alone_a_grant_refuses_every_redrive() -> None:
    """The advice the page gave before: its one statement, on the dead-letter queues."""
    grant = documented_grant()
    narrowed = dict(grant, Statement=[grant["Statement"][0]])
    narrowed["Statement"][0] = {
        **narrowed["Statement"][0],
        "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
    }
    for dead_letters, source in zip(DEAD_LETTERS, SOURCES, strict=True):
        assert on_queue(narrowed, "kms:Decrypt", dead_letters) is Decision.ALLOWED
        assert on_queue(narrowed, "kms:GenerateDataKey", source) is not Decision.ALLOWED


@pytest.mark.parametrize(
    ("action", "queue", "service", "why"),
    [
        ("kms:GenerateDataKey", WORKER.dead_letter_queue, "sqs", "write into a dead-letter queue"),
        ("kms:Decrypt", f"arn:aws:sqs:{STACK.region}:{STACK.account}:other", "sqs", "another"),
        ("kms:Decrypt", WORKER.dead_letter_queue, "s3", "through another service"),
        ("kms:Encrypt", WORKER.converse_queue, "sqs", "an action no redrive needs"),
        ("kms:ReEncryptFrom", WORKER.converse_queue, "sqs", "an action no redrive needs"),
    ],
)
def test_the_grant_allows_nothing_else(action: str, queue: str, service: str, why: str) -> None:
    assert on_queue(documented_grant(), action, queue, service) is not Decision.ALLOWED, why
