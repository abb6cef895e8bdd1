"""Hypothesis strategies for pages of stored items that other stages, or an operator's hand,
might have written: every attribute the stage reads drawn either well-formed or as a value of
any of DynamoDB's ten types (numbers negative, fractional, huge and at DynamoDB's limits,
times in year 1 and 9999 and without a zone, strings up to near the 400 KB item limit), and
stray items under other sort keys between ``msg#`` and ``state``.

Written from the contract's table layout and DynamoDB's own limits, not from the stage's reader:
the items are what DynamoDB would store (low-level attribute values, as ``PutItem`` takes them).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: DynamoDB's number limits: 38 digits, magnitudes from 1E-130 to 9.99…E+125.
NUMBER_EDGES = (
    "9.9999999999999999999999999999999999999E+125",
    "-9.9999999999999999999999999999999999999E+125",
    "1E-130",
    "-1E-130",
    "1E+30",
    "0",
    "-0",
    "-1",
    "2.5",
    "2000001",
    "999999999999",
    "1000000000000",
    "99999999999999999999999999999999999999",
)
TIME_EDGES = (
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:45Z",
    "9999-12-31T23:59:59-12:00",
    "2026-11-30T09:00:00",  # no zone
    "2026-11-30 09:00:00",
    "2026-02-30T09:00:00Z",
    "2026-11-30T24:00:00Z",
    "2026-11-30T09:00:60Z",
    "1999-12-31T23:59:59Z",
    "2100-01-01T00:00:00Z",
    "yesterday",
    "",
)
#: Keys that sort between ``msg#`` and ``state``, so the turn's one Query reads them.
STRAY_KEYS = (
    "msg#",
    "msg#abc",
    "msg#00000000004",
    "msg#0000000000042",
    "msg#000000000000",
    "msg#-00000000001",
    "note#000000000001",
    "snapshot",
    "sta",
    "msg#000000000007#part2",
)


def numbers() -> st.SearchStrategy[str]:
    """A DynamoDB number's text: ordinary, negative, fractional, huge or at the limits."""
    return st.one_of(
        st.sampled_from(NUMBER_EDGES),
        st.integers(-(10**15), 10**15).map(str),
        st.decimals(
            min_value=-(10**6), max_value=10**6, allow_nan=False, allow_infinity=False, places=3
        ).map(str),
    )


def texts() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=40),
        st.sampled_from(TIME_EDGES),
        st.sampled_from(["user", "assistant", "system", "5m", "1h", "2h", "USER"]),
        # Near the 400 KB item limit (the rest of the item must still fit beside it).
        st.integers(300_000, 390_000).map(lambda n: "x" * n),
    )


def values(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    """A DynamoDB attribute value of any of the ten types (sets non-empty, as DynamoDB needs)."""
    scalars: list[st.SearchStrategy[dict[str, Any]]] = [
        texts().map(lambda s: {"S": s}),
        numbers().map(lambda n: {"N": n}),
        st.binary(min_size=0, max_size=20).map(lambda b: {"B": b}),
        st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3, unique=True).map(
            lambda ss: {"SS": ss}
        ),
        st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=3, unique=True).map(
            lambda ns: {"NS": [str(n) for n in ns]}
        ),
        st.lists(st.binary(min_size=1, max_size=4), min_size=1, max_size=3, unique=True).map(
            lambda bs: {"BS": bs}
        ),
        st.just({"NULL": True}),
        st.booleans().map(lambda b: {"BOOL": b}),
    ]
    if depth > 0:
        inner = values(depth - 1)
        scalars += [
            st.dictionaries(st.text(min_size=1, max_size=12), inner, max_size=3).map(
                lambda m: {"M": m}
            ),
            st.lists(inner, max_size=3).map(lambda items: {"L": items}),
        ]
    return st.one_of(*scalars)


def either(
    good: st.SearchStrategy[dict[str, Any]], *, hostile: int = 3
) -> st.SearchStrategy[dict[str, Any] | None]:
    """The well-formed value seven times in ten or so, else absent, or anything at all
    (``hostile`` times in ten). Weighted by a draw, not by repeating ``good`` in ``one_of``:
    Hypothesis flattens a ``one_of`` and picks among its branches alike, and ``values()``
    alone has ten."""

    def pick(roll: int) -> st.SearchStrategy[dict[str, Any] | None]:
        if roll < 9 - hostile:
            return good
        return st.none() if roll == 9 - hostile else values()

    return st.integers(0, 9).flatmap(pick)


def _time(seconds: int) -> str:
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"2026-11-30T{9 + hour:02d}:{minute:02d}:{second:02d}Z"


@st.composite
def bills(draw: st.DrawFn, seq: int) -> dict[str, Any]:
    """``model_usage``: a bill as the writer stores it, each member perhaps hostile."""
    count = st.integers(0, 5_000).map(lambda n: {"N": str(n)})
    points = st.lists(
        st.fixed_dictionaries(
            {
                "ttl": either(st.sampled_from([{"S": "5m"}, {"S": "1h"}])),
                "prefix_tokens": either(count),
            }
        ),
        max_size=5,
    ).map(lambda ps: {"L": [{"M": {k: v for k, v in p.items() if v is not None}} for p in ps]})
    expected = st.fixed_dictionaries(
        {
            "prompt_tokens": either(count),
            "expected_read_tokens": either(count),
            "points": either(points),
        }
    ).map(lambda e: {"M": {k: v for k, v in e.items() if v is not None}})
    details = st.lists(
        st.fixed_dictionaries(
            {
                "ttl": either(st.sampled_from([{"S": "5m"}, {"S": "1h"}, {"L": [{"S": "5m"}]}])),
                "inputTokens": either(count),
            }
        ),
        max_size=3,
    ).map(lambda ds: {"L": [{"M": {k: v for k, v in d.items() if v is not None}} for d in ds]})
    members = draw(
        st.fixed_dictionaries(
            {
                "inputTokens": either(count),
                "outputTokens": either(count),
                "cacheReadInputTokens": either(count),
                "cacheWriteInputTokens": either(count),
                "cacheDetails": either(details),
                "answered_at": either(st.just({"S": _time(seq * 60 + 30)})),
                "command_id": either(st.just({"S": f"c-{seq}"})),
                "expected": either(expected),
            }
        )
    )
    return {"M": {name: value for name, value in members.items() if value is not None}}


@st.composite
def message_items(draw: st.DrawFn, conversation_id: str, seq: int) -> dict[str, Any]:
    role = "user" if seq % 2 else "assistant"
    item: dict[str, Any] = {
        "pk": {"S": conversation_id},
        "sk": {"S": f"msg#{seq:012d}"},
    }
    attributes = {
        "seq": either(st.just({"N": str(seq)})),
        "role": either(st.just({"S": role})),
        "content": either(st.text(min_size=1, max_size=400).map(lambda s: {"S": s})),
        "created_at": either(st.just({"S": _time(seq * 60)})),
    }
    if role == "assistant":
        attributes["model_usage"] = either(bills(seq), hostile=2)
    for name, value in draw(st.fixed_dictionaries(attributes)).items():
        if value is not None:
            item[name] = value
    return item


@st.composite
def state_items(draw: st.DrawFn, conversation_id: str, newest: int) -> dict[str, Any]:
    mark = st.integers(0, newest).map(lambda n: {"N": str(n)})
    attributes = draw(
        st.fixed_dictionaries(
            {
                "folded_through": either(mark),
                "fold_summary": either(st.text(min_size=1, max_size=300).map(lambda s: {"S": s})),
                "compaction_requested_through": either(mark),
                "compaction_requested_at": either(st.just({"S": _time(0)})),
                "compaction_request_version": either(
                    st.integers(1, 9).map(lambda n: {"N": str(n)})
                ),
                "window_anchor": either(
                    st.integers(1, max(1, newest)).map(lambda n: {"N": str(n)})
                ),
                "window_anchor_folded_through": either(mark),
                "window_summary": either(st.text(max_size=300).map(lambda s: {"S": s})),
                "window_summary_folded_through": either(mark),
            }
        )
    )
    item = {"pk": {"S": conversation_id}, "sk": {"S": "state"}}
    return {**item, **{name: value for name, value in attributes.items() if value is not None}}


@st.composite
def pages(draw: st.DrawFn, conversation_id: str) -> list[dict[str, Any]]:
    """The items of one conversation: up to 30 messages, perhaps a state item, perhaps strays;
    at most one string near the item limit in all, so the page stays a page."""
    newest = draw(st.integers(0, 30))
    items = [draw(message_items(conversation_id, seq)) for seq in range(1, newest + 1)]
    if draw(st.booleans()):
        items.append(draw(state_items(conversation_id, newest)))
    strays = draw(st.lists(st.sampled_from(STRAY_KEYS), max_size=3, unique=True))
    for key in strays:
        extra = draw(
            st.dictionaries(st.sampled_from(["seq", "role", "content"]), values(1), max_size=3)
        )
        items.append({"pk": {"S": conversation_id}, "sk": {"S": key}, **extra})
    large = [i for i, item in enumerate(items) if _size(item) > 200_000]
    for index in large[1:]:
        items[index] = {"pk": items[index]["pk"], "sk": items[index]["sk"]}
    return items


def _size(value: object) -> int:
    if isinstance(value, dict):
        return sum(len(str(k)) + _size(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(_size(v) for v in value)
    return len(value) if isinstance(value, str | bytes) else 8
