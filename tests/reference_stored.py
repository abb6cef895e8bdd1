"""``docs/reference/stored-items.md``: what the stage reads of the history table, rendered from
:mod:`worker.adapters.stored_attributes` by ``make docs`` (``tests/reference.py``)."""

from __future__ import annotations

from worker.adapters.stored_attributes import ATTRIBUTES, MAX_TOKENS, ItemKind, StoredAttribute
from worker.stamps import TIME_RANGE

HEADINGS: dict[ItemKind, str] = {
    "message": "Message items (`sk` = `msg#` + seq)",
    "bill": "The bill on an answer (`model_usage`)",
    "state": "The `state` item",
}


def stored_items_page(head: list[str]) -> str:
    lines = [
        *head,
        "The history table is written by three other stages (the history writer, the "
        "compactor, the model stage's writer of `model_usage`) and now and then by an "
        "operator's hand. What they store is input to this stage, exactly like a command: "
        "each attribute it reads has a type and a range, below, and one reader "
        "(`worker/adapters/stored_items.py`) parses every item of a page once, at the edge. "
        "It never raises: a value outside the table is",
        "",
        "- on a **message**, the message left out of the window "
        "(`clerk.converse_history_entries_dropped`, with the reason);",
        "- on a **bill**, the bill dropped whole, never half-used "
        "(`clerk.converse_bill_dropped`, with the answer's seq, the attribute and the "
        "reason; the `BillsDropped` metric): the turn goes on as if that answer had no bill, "
        "so its calibration, replay and checks are those of the same conversation without "
        "it, and `worker bill` lists it as dropped;",
        "- on the **state** item, either served with the safe reading given for the "
        "attribute (`clerk.converse_stored_attribute_ignored`), or, where no reading is safe, "
        "the command refused at once to the dead-letter queue with a `RejectionReason` "
        "that names the attribute (`the conversation's stored state is malformed: "
        "<attribute>: <reason>`), never retried into it.",
        "",
        "Reasons name the attribute and what is wrong with it, never the value. An optional "
        "attribute stored as `NULL` reads as absent; attributes not listed are ignored. "
        f"Times ({TIME_RANGE}) are checked before any arithmetic, so no stored or sent time "
        f"can overflow a computation; a count above {MAX_TOKENS:,} tokens is more than any "
        "real prompt holds and is refused like a negative one.",
        "",
    ]
    for kind, heading in HEADINGS.items():
        lines += [
            f"## {heading}",
            "",
            "| attribute | type | holds | may be absent | written by | when malformed |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        lines += [_row(attribute) for attribute in ATTRIBUTES if attribute.item == kind]
        lines.append("")
    return "\n".join(lines)


def _row(attribute: StoredAttribute) -> str:
    absent = "yes" if attribute.optional else "no"
    return (
        f"| `{attribute.name}` | {attribute.type} | {attribute.holds} | {absent} "
        f"| {attribute.writer} | {attribute.when_malformed} |"
    )
