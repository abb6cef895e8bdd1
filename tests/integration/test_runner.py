"""The converse stage over the wire: a real worker against a moto server."""

from __future__ import annotations

import pytest

from tests.conftest import captured_logs
from tests.integration.conftest import Stack, body_of, exchanges, running_worker
from worker.memory import trim_message

pytestmark = pytest.mark.integration


async def test_a_command_in_gives_the_exact_payload_out(stack: Stack) -> None:
    """GIVEN 20 exchanges of 10 tokens and a fold summary, WHEN counsel asks,
    THEN the model queue gets the contract's payload: the newest 24 messages."""
    history = exchanges(20)
    await stack.seed("matter-1187", history, folded_through=10, summary="The fold so far.")
    await stack.send_command(
        command_id="c-8f2e", conversation_id="matter-1187", sent_at="2026-11-30T09:00:00Z"
    )
    async with running_worker(stack.settings()):
        [message] = await stack.drain("MODEL_QUEUE_URL", expect=1)

    assert stack.prompts_checked == 1  # drain checked it against Converse's rules
    assert body_of(message) == {
        "type": "prompt",
        "contract": 1,
        "command_id": "c-8f2e",
        "conversation_id": "matter-1187",
        "memory": {"summary": "The fold so far.", "folded_through": 10},
        "history": [
            {"seq": seq, "role": role, "content": content}
            for seq, (role, content) in enumerate(history, start=1)
            if seq >= 17
        ],
        "message": "What does clause 14.2 say?",
        "window": {
            "kept": 24,
            "dropped": 16,
            "trimmed": 0,
            "estimated_tokens": 240,
            "left_out": 0,
        },
        # The view's estimate: the summary (16 characters: 4 tokens), the window's 240 and the
        # question (26 characters: 7); its one point after the summary, 4 tokens in, is far
        # below the model's minimum, so no read is expected. Its digest: the first 16 hex
        # digits of the SHA-256 of {"messages":[],"system":["The fold so far."]}.
        "cache": {
            "prompt_tokens": 4 + 240 + 7,
            "expected_read_tokens": 0,
            "points": [{"ttl": "5m", "prefix_tokens": 4, "prefix_digest": "36d9650670a48c76"}],
        },
        "converse": {
            "system": [{"text": "The fold so far."}, {"cachePoint": {"type": "default"}}],
            "messages": [
                {"role": role, "content": [{"text": content}]}
                for seq, (role, content) in enumerate(history, start=1)
                if seq >= 17
            ]
            + [{"role": "user", "content": [{"text": "What does clause 14.2 say?"}]}],
        },
    }


async def test_memory_is_null_without_a_fold_summary(stack: Stack) -> None:
    await stack.seed("matter-2", exchanges(2))
    await stack.send_command(command_id="c-1", conversation_id="matter-2")
    async with running_worker(stack.settings()):
        [message] = await stack.drain("MODEL_QUEUE_URL", expect=1)
    payload = body_of(message)
    assert payload["memory"] is None
    assert [m["seq"] for m in payload["history"]] == [1, 2, 3, 4]
    assert payload["window"] == {
        "kept": 4,
        "dropped": 0,
        "trimmed": 0,
        "estimated_tokens": 40,
        "left_out": 0,
    }
    assert payload["converse"]["system"] == []


async def test_the_current_counsel_message_is_never_trimmed(stack: Stack) -> None:
    """The current message rides `message` whole, however far above every limit it is,
    while a history message of the same text is trimmed; in the model-ready view it is the
    last text block, character for character, after the trimmed history."""
    pasted = "".join(f"Clause {i}: the Supplier shall indemnify the Buyer. " for i in range(3500))
    assert len(pasted) > 4 * 4000 * 10  # ten times the whole window budget
    await stack.seed("matter-3", [("user", pasted), ("assistant", "Noted.")])
    await stack.send_command(command_id="c-big", conversation_id="matter-3", message=pasted)
    async with running_worker(stack.settings()):
        [message] = await stack.drain("MODEL_QUEUE_URL", expect=1)
    payload = message["ResolvedPayload"]  # over the inline limit: it travelled via S3
    assert payload["message"] == pasted
    assert "tokens omitted" not in payload["message"]
    assert payload["history"][0]["content"] == trim_message(pasted, 1000)
    assert payload["window"]["trimmed"] == 1
    assert all(m["content"] != pasted for m in payload["history"])
    converse = payload["converse"]["messages"]
    assert converse[-1]["content"][-1]["text"] == pasted
    assert converse[0]["content"][0]["text"] == trim_message(pasted, 1000)
    blocks = [block["text"] for m in converse for block in m["content"]]
    assert blocks.count(pasted) == 1


async def test_real_history_shapes_reach_the_model_queue_ready_for_converse(stack: Stack) -> None:
    """GIVEN a greeting before the first question, a question asked twice, an answer in two
    parts, an empty answer and an unanswered last question, WHEN counsel asks, THEN
    `converse` alternates from a user turn, invents nothing, and what it leaves out is
    counted in `window.left_out` and logged by reason without content."""
    history = [
        ("assistant", "Hello, I am Mira. How can I help on this matter?"),
        ("user", "Who are the parties?"),
        ("user", "Who are the parties to the supply agreement?"),
        ("assistant", "Northwind (buyer) and Contoso (supplier)."),
        ("assistant", "The agreement is dated 2024."),
        ("user", "Is there a cap on liability?"),
        ("assistant", "  "),
        ("user", "Is there a cap on liability? (asked again)"),
    ]
    await stack.seed("matter-shapes", history)
    await stack.send_command(command_id="c-shapes", conversation_id="matter-shapes")
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            [message] = await stack.drain("MODEL_QUEUE_URL", expect=1)
    payload = body_of(message)
    assert [m["seq"] for m in payload["history"]] == list(range(1, 9))  # history as stored
    assert payload["window"]["left_out"] == 2
    texts = [[block["text"] for block in m["content"]] for m in payload["converse"]["messages"]]
    assert [m["role"] for m in payload["converse"]["messages"]] == [
        "user",
        "assistant",
        "user",
    ]
    assert texts == [
        [history[1][1], history[2][1]],
        [history[3][1], history[4][1]],
        [history[5][1], history[7][1], "What does clause 14.2 say?"],
    ]
    [left_out] = [e for e in logs if e["event"] == "clerk.converse_messages_left_out"]
    assert (left_out["count"], left_out["reasons"]) == (2, {"leading_answer": 1, "blank": 1})
    assert left_out["command_id"] == "c-shapes"
    assert all(content not in repr(logs) for _, content in history if content.strip())


async def test_malformed_history_entries_are_dropped_with_a_warning(stack: Stack) -> None:
    await stack.seed("matter-4", exchanges(3))
    bad = [
        {"role": None, "content": {"S": "no role"}},
        {"role": {"S": "system"}, "content": {"S": "unknown role"}},
        {"role": {"S": "user"}, "content": {"N": "42"}},
    ]
    items = []
    for seq, fields in enumerate(bad, start=7):
        item = {"pk": {"S": "matter-4"}, "sk": {"S": f"msg#{seq:012d}"}, "seq": {"N": str(seq)}}
        item.update({k: v for k, v in fields.items() if v is not None})
        items.append(item)
    await stack.put_items(items)
    await stack.send_command(command_id="c-4", conversation_id="matter-4")
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            [message] = await stack.drain("MODEL_QUEUE_URL", expect=1)
    payload = body_of(message)
    assert [m["seq"] for m in payload["history"]] == [1, 2, 3, 4, 5, 6]
    [dropped] = [e for e in logs if e["event"] == "clerk.converse_history_entries_dropped"]
    assert dropped["log_level"] == "warning"
    assert dropped["count"] == 3
    assert dropped["reasons"] == {
        "role: missing": 1,
        "role: neither user nor assistant": 1,
        "content: a number, not a string": 1,
    }
    assert dropped["conversation_id"] == "matter-4"
    assert dropped["command_id"] == "c-4"


async def test_the_window_logs_what_it_dropped_without_content(stack: Stack) -> None:
    history = exchanges(30)
    await stack.seed("matter-5", history)
    secret = "PRIVILEGED: the client admits the breach"
    await stack.send_command(command_id="c-5", conversation_id="matter-5", message=secret)
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            await stack.drain("MODEL_QUEUE_URL", expect=1)
    [bounded] = [e for e in logs if e["event"] == "clerk.converse_history_window_bounded"]
    assert (bounded["dropped"], bounded["kept"], bounded["trimmed"]) == (36, 24, 0)
    assert bounded["estimated_tokens"] == 240
    rendered = repr(logs)
    assert secret not in rendered
    assert all(content not in rendered for _, content in history)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", "body is not valid JSON"),
        ('["converse"]', "body is a JSON list, not an object"),
        ('{"type": "converse", "conversation_id": "m", "message": "hi"}', "command_id: Field"),
        (
            '{"type": "converse", "command_id": "c", "conversation_id": "m", "message": ""}',
            "message is blank",
        ),
        (
            '{"type": "converse", "command_id": "c", "conversation_id": "m", '
            '"message": " \\u00a0\\n\\u2028 "}',
            "message is blank",
        ),
        ('{"type": "compact", "command_id": "c", "conversation_id": "m", "message": "x"}', "type"),
    ],
)
async def test_invalid_commands_go_to_the_dead_letter_queue_with_a_reason(
    stack: Stack, body: str, reason: str
) -> None:
    await stack.send_raw(body)
    await stack.seed("matter-6", exchanges(1))
    await stack.send_command(command_id="c-after", conversation_id="matter-6")
    with captured_logs() as logs:
        async with running_worker(stack.settings()):
            served = await stack.drain("MODEL_QUEUE_URL", expect=1)
            [dead] = await stack.drain(await stack.dead_letter_url(), expect=1)
    assert [body_of(m)["command_id"] for m in served] == ["c-after"]
    assert dead["Body"] == body
    assert reason in dead["MessageAttributes"]["RejectionReason"]["StringValue"]
    [rejected] = [e for e in logs if e["event"] == "clerk.converse_command_rejected"]
    assert reason in rejected["reason"]
    assert body not in repr(logs)
    assert await stack.depth("CONVERSE_QUEUE_URL") == 0  # deleted, not left to retry
