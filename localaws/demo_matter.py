"""The demo's matters (``make run``, :mod:`localaws.demo`): what is stored before the worker
starts, and what counsel asks once it runs.

The long matter holds the shapes a stored history really takes (a greeting before the first
question, a pasted contract, a question asked twice, an answer in two parts, an empty answer);
the short one opens on a stored greeting. Counsel then asks the long matter a few more
questions, minutes apart, each stamped with its ``sent_at``: the moments the prompt cache's
lifetimes are measured against.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from localaws.history_writer import message_item, state_item, write_items

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of them runs
    from types_aiobotocore_dynamodb import DynamoDBClient
    from types_aiobotocore_dynamodb.type_defs import AttributeValueTypeDef

CONVERSATION_ID = "matter-1187"
FOLDED_THROUGH = 47
SUMMARY = (
    "Counsel acts for Northwind (buyer) under a 2024 master supply agreement with Contoso. "
    "Agreed so far: the governing law is English law; notices go to the registered office."
)
GREETING = "Hello, I am Mira. Ask me anything about this matter."
QUESTIONS = [
    "Summarise the supplier's delivery obligations under clause {n}.",
    "Does clause {n} allow the buyer to withhold payment for late delivery?",
    "How does the limitation of liability in clause {n} interact with the indemnity?",
    "Draft a short note to the client on the risk in clause {n}.",
]
ANSWER = (
    "Under clause {n} the supplier must deliver in accordance with the agreed schedule; "
    "time is of the essence only where the order says so. The buyer's remedies are a "
    "service credit and, after a cure period of 30 days, termination for material breach. "
    "Nothing in clause {n} excludes the general right to damages, but the cap in clause 18 "
    "applies. I would flag the interaction with the force majeure carve-out to the client."
)
#: The newest turns, where the window is: the shapes a stored history really takes.
RECENT: list[tuple[str, str]] = [
    ("user", "Here is the agreement; what does clause 14.2 say?\n{contract}"),
    ("assistant", "Clause 14.2 lets either party terminate on 90 days' written notice."),
    ("user", "Is the notice period in clause 14.2 shortened for insolvency?"),
    # The first try failed before an answer was stored; counsel asked again.
    ("user", "Is the notice period in clause 14.2 shortened for insolvency? (asked again)"),
    # A long answer stored in two parts.
    ("assistant", "Yes: on an insolvency event the notice period falls to 10 days (part 1/2)."),
    ("assistant", "The insolvency events are listed in clause 1.1 (part 2/2)."),
    ("user", "Which notices have we already served?"),
    # A failed generation stored as an empty answer.
    ("assistant", ""),
    ("user", "Which notices have we served under clause 14.2?"),
    ("assistant", "None yet: the only notice on file is the delay notice under clause 9."),
]
#: A second, short matter whose window reaches its first message: a stored greeting.
INTAKE_ID = "matter-2040"
INTAKE: list[tuple[str, str]] = [
    ("assistant", GREETING),
    ("user", "We act for the landlord. Can the tenant assign the lease without consent?"),
    ("assistant", "No: clause 7.3 requires the landlord's prior written consent."),
]
#: The first commands, one on each matter, both sent at :data:`START`.
COMMANDS = [
    (CONVERSATION_ID, "Given all that, can the buyer terminate under clause 14.2 now?"),
    (INTAKE_ID, "Draft the landlord's reply refusing consent."),
]
#: When counsel sent the first commands: the demo's moments count from here.
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
#: How long after a command's ``sent_at`` the model stage answers it.
ANSWER_DELAY = timedelta(seconds=6)
#: The model stage's answer to the long matter's first command.
FIRST_ANSWER = (
    "Yes: clause 14.2 lets the buyer terminate on 90 days' written notice, and no notice has "
    "been served yet, so the period starts when it is."
)


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A further question on the long matter, sent ``after`` :data:`START`, and the answer the
    model stage gives it."""

    after: timedelta
    question: str
    answer: str

    @property
    def sent_at(self) -> datetime:
        return START + self.after


FOLLOW_UPS = (
    FollowUp(
        timedelta(minutes=3),
        "Does the 90-day period run from posting or from receipt of the notice?",
        "From receipt: clause 22.3 deems a notice received two business days after posting.",
    ),
    FollowUp(
        timedelta(minutes=5),
        "Is a notice sent by email valid under clause 22?",
        "Only with a copy by post within one business day (clause 22.4).",
    ),
    # Counsel reads the contract for 12 minutes: longer than a 5-minute cache entry lives.
    FollowUp(
        timedelta(minutes=17),
        "Draft the termination notice under clause 14.2.",
        "Draft: Northwind gives notice under clause 14.2 to terminate the agreement 90 days "
        "after this notice is received.",
    ),
    FollowUp(
        timedelta(minutes=19),
        "Which address should the notice go to?",
        "Contoso's registered office, as clause 22.1 requires and the summary records.",
    ),
)


def _contract() -> str:
    clauses = (
        f"{n}. The Supplier shall perform its obligations under this clause {n} with "
        "reasonable skill and care, in accordance with Good Industry Practice, and shall "
        "notify the Buyer in writing of any anticipated delay without undue delay.\n"
        for n in range(1, 160)
    )
    return "MASTER SUPPLY AGREEMENT (extract pasted by counsel)\n" + "".join(clauses)


def demo_history(length: int = 57) -> Iterator[tuple[int, str, str]]:
    """(seq, role, content) oldest first: a greeting, question/answer pairs, then the
    recent turns (a pasted contract, a retried question, a two-part and an empty answer)."""
    yield 1, "assistant", GREETING
    older = length - 1 - len(RECENT)
    for i in range(older):
        n = i // 2 + 3
        if i % 2 == 0:
            yield i + 2, "user", QUESTIONS[(i // 2) % len(QUESTIONS)].format(n=n)
        else:
            yield i + 2, "assistant", ANSWER.format(n=n)
    for seq, (role, text) in enumerate(RECENT, start=older + 2):
        yield seq, role, text.format(contract=_contract()) if "{contract}" in text else text


def _items(
    conversation_id: str, messages: Iterable[tuple[int, str, str]]
) -> list[dict[str, AttributeValueTypeDef]]:
    return [message_item(conversation_id, seq, role, content) for seq, role, content in messages]


async def seed(dynamodb: DynamoDBClient, table: str) -> None:
    items = _items(CONVERSATION_ID, demo_history())
    items.append(state_item(CONVERSATION_ID, folded_through=FOLDED_THROUGH, summary=SUMMARY))
    items += _items(INTAKE_ID, ((seq, r, c) for seq, (r, c) in enumerate(INTAKE, start=1)))
    await write_items(dynamodb, table, items)
