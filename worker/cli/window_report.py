"""What the next turn would send for a stored conversation, and why (``worker window``).

An operator's answer to "why did Mira forget what I said?". It reads the history as a turn
does (the same Query and the same window code, in the configured mode or the one asked
for) and prints, without sending or writing anything: each kept message's seq, role,
estimated tokens and whether it was trimmed; what was dropped; the fold mark and any fold
gap; the messages the Converse view leaves out; in the cache-aligned mode the stored anchor
and what this turn would do with it; and what the prompt-cache model expects the turn to
read from the cache, write to it and bill.

The cache figures assume the previous turn's prompt is in the cache (sent 60 s before,
within the 5-minute TTL). That prompt is rebuilt, not stored: the window of the same mode
over the history before the newest question, with that question as its current message and
the stored anchor (cache-aligned), under today's summary. When the stored anchor was chosen
under another fold mark, the summary has changed since the previous prompt and nothing of
this prompt is assumed cached. The next question is not known: a short placeholder stands
for it (its tokens are billed uncached either way).

No message content or summary is printed unless ``--show-content`` is given.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from functools import partial

from worker.caching.anchor import AlignedWindow
from worker.caching.bill_model import CacheRules, PromptCache, TurnCost, price_turn
from worker.caching.lifetimes import TtlChoice
from worker.memory import Window, estimate_tokens, fold_gap
from worker.memory.converse import ConverseView, is_blank
from worker.planning import TurnPlan, plan_turn
from worker.ports import HistoryStore
from worker.settings import Settings
from worker.turn.reading import read_turn

#: Stands for the next question, which is not known yet.
NEXT_QUESTION = "(the next question)"
#: The previous turn, as the cache model assumes it: this long before the next one.
PREVIOUS_TURN_SECONDS = 60.0


async def describe_next_turn(
    store: HistoryStore,
    conversation_id: str,
    settings: Settings,
    *,
    show_content: bool = False,
    rules: CacheRules | None = None,
    now: datetime | None = None,
) -> list[str]:
    """The lines ``worker window`` prints. Reads only (Queries), never writes. The next
    question is taken as sent ``now`` (the clock by default) for the cache lifetimes."""
    rules = rules or CacheRules()
    sent_at = now or datetime.now(UTC)
    read = await read_turn(
        store,
        conversation_id,
        page_size=settings.history_page_size,
        plan=partial(
            plan_turn, message=NEXT_QUESTION, sent_at=sent_at, config=settings.plan_config
        ),
    )
    page, window, view, ttls = read.page, read.window, read.view, read.ttls
    state = page.state
    newest = page.messages[0].seq if page.messages else 0
    limits = settings.window_limits
    lines = [
        f"conversation {conversation_id}: the next turn, as the worker would build it "
        "(nothing sent, nothing written)",
        f"history: newest seq {newest}; fold mark {state.folded_through} "
        f"(summary {_summary_size(state.summary)}); read in {page.queries} "
        + ("Query" if page.queries == 1 else "Queries"),
        f"mode: {settings.history_window_mode}"
        + (
            f" (headroom {settings.anchor_headroom.tokens} tokens, "
            f"{settings.anchor_headroom.messages} messages)"
            if settings.cache_aligned
            else ""
        ),
    ]
    if read.aligned is not None:
        lines.append(_anchor_line(read.aligned, read))
        lines.append(_summary_line(read.aligned))
    if ttls is not None:
        lines.append(_ttl_line(ttls, settings.history_cache_ttl))
    lines += [
        f"window: {window.kept} kept{_seq_range(window)}; "
        f"{window.estimated_tokens:,} estimated tokens of {limits.max_tokens:,}, "
        f"{window.kept} messages of {limits.max_messages}; {window.trimmed} trimmed",
        f"dropped: {window.dropped} older than the window" + _seqs(1, window.dropped),
        _gap_line(window, state.folded_through),
        _left_out_line(view),
        "   seq  role        tokens  trimmed",
    ]
    stored = {m.seq: m for m in page.messages}
    for message in window.messages:
        tokens = estimate_tokens(message.content)
        original = stored.get(message.seq)
        trimmed = original is not None and original.content != message.content
        note = f"yes ({estimate_tokens(original.content):,} stored)" if trimmed and original else ""
        lines.append(f"{message.seq:>6}  {message.role:<9} {tokens:>7}  {note}".rstrip())
        if show_content:
            lines += [f"        | {line}" for line in message.content.splitlines() or [""]]
    if show_content and state.summary is not None:
        lines.append("summary:")
        lines += [f"        | {line}" for line in state.summary.splitlines() or [""]]
    cost, assumption = await _priced(store, conversation_id, settings, read, view, rules)
    lines += [
        f"cache model ({assumption}): read {cost.read:,}, written {cost.written:,}, "
        f"uncached {cost.uncached:,} tokens; billed {cost.billed:,.0f} input-token units "
        f"({cost.input_tokens:,} without a cache)"
    ]
    return lines


def _summary_size(summary: str | None) -> str:
    return "none" if summary is None else f"{estimate_tokens(summary):,} tokens"


def _seq_range(window: Window) -> str:
    if not window.messages:
        return ""
    return f", seq {window.messages[0].seq}-{window.messages[-1].seq}"


def _seqs(first: int, last: int) -> str:
    if last < first:
        return ""
    return f" (seq {first})" if first == last else f" (seq {first}-{last})"


def _anchor_line(aligned: AlignedWindow, read: TurnPlan) -> str:
    stored = read.page.anchor
    held = (
        f"stored seq {stored.seq} (fold mark {stored.folded_through})"
        if stored is not None
        else "none stored"
    )
    if aligned.outcome == "kept":
        doing = "keep it (writes nothing)"
    elif aligned.outcome == "fallback":
        doing = (
            "fall back to the sliding window: the floor and the unfolded tail alone are over "
            "the budget (writes nothing)"
        )
    else:
        new = aligned.anchor_to_store
        at = f" at seq {new.seq} (fold mark {new.folded_through})" if new is not None else ""
        write = "would store it" if read.anchor_to_write is not None else "already stored"
        doing = f"re-anchor ({aligned.reason}){at}; {write}"
    return f"anchor: {held}; this turn would {doing}"


def _summary_line(aligned: AlignedWindow) -> str:
    shown, anchor = aligned.shown, aligned.anchor
    held = (
        "stored with the anchor"
        if anchor and anchor.snapshot
        else "not stored (none, or too large)"
    )
    behind = (
        f"; the newest fold is {aligned.behind} seqs past it (taken when the window must move)"
        if aligned.behind
        else "; the newest"
    )
    return f"summary shown: fold mark {shown.folded_through}{behind}; snapshot {held}"


def _ttl_line(choice: TtlChoice, setting: str) -> str:
    """The cache points' TTLs the next turn would choose, and why (the pace read)."""
    ttls = ", ".join(ttl or "no point" for ttl in choice.ttls) or "no cache point"
    why = {
        "fixed": f"HISTORY_CACHE_TTL={setting}",
        "no_pace": "no timestamps to read the pace from: 5m, as without the policy",
        "below_minimum": "no point reaches PROMPT_CACHE_MIN_TOKENS: 5m, nothing is cached",
        "expected_cost": "the expected cost under the pace",
    }[choice.why]
    pace = choice.pace
    if pace is None or not pace.gaps:
        return f"cache lifetimes: {ttls} ({why})"
    return (
        f"cache lifetimes: {ttls} ({why}; {len(pace.gaps)} gaps read, the newest "
        f"{pace.gaps[-1] / 60:.1f} min if asked now; P(gap < 5 min) {pace.p5:.2f}, "
        f"P(gap < 1 h) {pace.p60:.2f}; expected read {choice.read:,} tokens)"
    )


def _gap_line(window: Window, folded_through: int) -> str:
    gap = fold_gap(window, folded_through)
    if gap is None:
        return "fold gap: none"
    return (
        f"fold gap: {gap.count} unfolded message(s) outside the window"
        f"{_seqs(gap.first_seq, gap.last_seq)}: held by neither window nor fold"
    )


def _left_out_line(view: ConverseView) -> str:
    if not view.left_out:
        return "left out of the view: none"
    each = ", ".join(f"seq {left.seq} ({left.reason})" for left in view.left_out)
    return f"left out of the view: {len(view.left_out)}: {each}"


async def _priced(
    store: HistoryStore,
    conversation_id: str,
    settings: Settings,
    read: TurnPlan,
    view: ConverseView,
    rules: CacheRules,
) -> tuple[TurnCost, str]:
    """The next turn's cost under the cache model, after the previous turn's prompt."""
    anchor = read.page.anchor
    cache = PromptCache()
    # The summary the prompt shows moved since the anchor was stored (in the cache-aligned
    # mode a snapshot keeps it put: only a re-anchoring turn changes it).
    if anchor is not None and anchor.folded_through != read.folded_through:
        assumption = "the fold moved since the anchor was stored: a cold cache"
    else:
        previous = await _previous_view(store, conversation_id, settings, read)
        if previous is None:
            assumption = "no earlier question: a cold cache"
        else:
            _, cache = price_turn(cache, previous.system, previous.messages, at=0.0, rules=rules)
            assumption = (
                f"the previous turn's prompt rebuilt and cached {PREVIOUS_TURN_SECONDS:g} s before"
            )
    cost, _ = price_turn(cache, view.system, view.messages, at=PREVIOUS_TURN_SECONDS, rules=rules)
    return cost, assumption


async def _previous_view(
    store: HistoryStore, conversation_id: str, settings: Settings, read: TurnPlan
) -> ConverseView | None:
    """The previous turn's prompt: the same mode's window over the history before the
    newest question, that question as its current message. Reads the next older page
    when there is one, so that window has a full page to choose from."""
    page = read.page
    question = next((m for m in page.messages if m.role == "user"), None)
    if question is None or is_blank(question.content):
        return None
    if page.older is not None:
        older = await store.load_page(
            conversation_id, settings.history_page_size, older_than=page.older
        )
        page = page.extended_by(older)
    before = tuple(m for m in page.messages if m.seq < question.seq)
    previous = replace(page, messages=before)
    return plan_turn(previous, question.content, sent_at=None, config=settings.plan_config).view
