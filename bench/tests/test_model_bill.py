"""The benchmark's model bill (bench/parts/model_bill.py): a recorded turn sequence is
priced exactly as the cache model prices it, from views kept in the compact codec."""

from __future__ import annotations

import pytest

from bench.parts.cache_bill import ViewCodec
from bench.parts.model_bill import TurnView, price
from worker.caching.bill_model import CacheRules
from worker.memory import HistoryMessage, Window, render_converse
from worker.memory.converse import previous_history_end

RULES = CacheRules(min_prefix_tokens=1024, ttl="5m")


def history(count: int) -> tuple[HistoryMessage, ...]:
    """``count`` messages of 300 estimated tokens each (1,200 characters), a question first."""
    return tuple(
        HistoryMessage(seq, "user" if seq % 2 else "assistant", f"{seq:04d}" + "x" * 1_196)
        for seq in range(1, count + 1)
    )


def turn(codec: ViewCodec, messages: tuple[HistoryMessage, ...], *, points: bool) -> TurnView:
    window = Window(messages, 0, 0, 300 * len(messages), False)
    view = render_converse(
        window,
        "q" * 40,  # the current message: 10 tokens
        None,
        cache_history=points,
        previous_history_end=previous_history_end(window) if points else None,
    )
    return TurnView(codec.encode(view.system, view.messages), window.kept, 300 * len(messages),
                    fold_gap=False)  # fmt: skip


def test_the_codec_gives_back_the_view_block_for_block() -> None:
    codec = ViewCodec()
    window = Window(history(5), 0, 0, 1_500, False)
    view = render_converse(window, "current?", "a summary", cache_history=True)
    system, messages = codec.decode(codec.encode(view.system, view.messages))
    assert system == list(view.system)
    assert messages == list(view.messages)


def test_a_recorded_sequence_is_priced_read_write_and_expiry_as_the_cache_model_says() -> None:
    """GIVEN three turns of one conversation, the history growing by one exchange a turn,
    sent at 0 s, 60 s and 460 s (the last past the 5-minute TTL of the entry read at 60 s)
    WHEN the cache-aligned shape (a point after the history) and the sliding shape (no
    point) are priced
    THEN the cached shape writes its 1,200-token history on turn 1 (1.25x), reads it on
    turn 2 (0.1x) and writes only the new exchange, and writes everything again on turn 3;
    the shape without a point pays 1x for everything."""
    codec = ViewCodec()
    lengths = (4, 6, 8)
    streams = {
        "sliding": {"c": [turn(codec, history(n), points=False) for n in lengths]},
        "cache-aligned": {"c": [turn(codec, history(n), points=True) for n in lengths]},
    }
    tallies = price(streams, codec, RULES, {"c": [0.0, 60.0, 460.0]})

    sliding, aligned = tallies["sliding"], tallies["cache-aligned"]
    assert sliding.billed == (1_200 + 10) + (1_800 + 10) + (2_400 + 10)
    assert (aligned.read, aligned.written, aligned.uncached) == (1_200, 1_200 + 600 + 2_400, 30)
    assert aligned.billed == pytest.approx(
        (1_200 * 1.25 + 10) + (1_200 * 0.1 + 600 * 1.25 + 10) + (2_400 * 1.25 + 10)
    )
    assert aligned.fewer_messages == [0, 0, 0]
    assert aligned.history_tokens == sliding.history_tokens == 300 * sum(lengths)
