"""Times as the contract spells them: RFC 3339 with a zone, within a range no real stamp leaves.

Every time the stage reads from outside — a command's ``sent_at``, a message's ``created_at``,
a bill's ``answered_at``, the fold claim's ``compaction_requested_at`` — goes through
:func:`read_time` before any arithmetic. A time outside ``[EARLIEST, LATEST)`` is refused, so
adding an hour, a day or a century to any time the stage holds can never overflow (Python's
``datetime`` ends at 9999-12-31), and a time without a zone is refused rather than guessed:
local time stamped as if it were UTC is the commonest timestamp bug there is.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

#: The earliest and the first refused time: this stage did not exist before the first, and a
#: time past the second is a broken clock, not a schedule.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})", re.ASCII
)
TIME_RANGE = f"RFC 3339 with a zone, from {EARLIEST:%Y-%m-%d} to before {LATEST:%Y-%m-%d}"


def read_time(text: str) -> datetime | str:
    """The UTC time ``text`` spells, or the reason it is not one the stage can use (never
    the text itself)."""
    spelled = text.upper()
    if len(spelled) > 40 or not _RFC3339.fullmatch(spelled):
        return "not an RFC 3339 time with a zone"
    try:
        parsed = datetime.fromisoformat(spelled)
    except ValueError:
        return "not a valid date and time"
    # The local year first: a zone's offset applied to year 1 or 9999 could overflow.
    if not EARLIEST.year - 1 <= parsed.year <= LATEST.year:
        return f"outside {EARLIEST:%Y} to {LATEST:%Y}"
    moment = parsed.astimezone(UTC)
    if not EARLIEST <= moment < LATEST:
        return f"outside {EARLIEST:%Y} to {LATEST:%Y}"
    return moment
