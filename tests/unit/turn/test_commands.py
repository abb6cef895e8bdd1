"""The wire formats: parsing the converse command (what is rejected, with which reason, what is
kept as is), and the contract's version on what the stage sends."""

from __future__ import annotations

import json

import pytest

from worker.errors import RejectedCommand
from worker.memory import CompactionPlan, FoldState, HistoryMessage, bound_history, render_converse
from worker.settings import Settings
from worker.turn.commands import (
    CONTRACT_VERSION,
    ConverseCommand,
    compaction_request,
    encode_body,
    parse_command,
    prompt_payload,
)


def body(message: object) -> str:
    return json.dumps(
        {"type": "converse", "command_id": "c-1", "conversation_id": "m-1", "message": message}
    )


@pytest.mark.parametrize("blank", ["", " ", "\n\t", "\u00a0", "\u2028", " \u3000\u2029 "])
def test_a_blank_message_is_rejected_as_blank(blank: str) -> None:
    with pytest.raises(RejectedCommand) as caught:
        parse_command(body(blank))
    assert caught.value.reason == "message is blank"


@pytest.mark.parametrize("message", [" padded \n", "\u00a0?", "x"])
def test_a_message_with_any_visible_character_is_kept_exactly(message: str) -> None:
    assert parse_command(body(message)).message == message


def test_a_message_that_is_not_a_string_is_rejected_for_its_type_not_as_blank() -> None:
    with pytest.raises(RejectedCommand) as caught:
        parse_command(body(42))
    assert caught.value.reason.startswith("invalid command: message:")


@pytest.mark.parametrize("message", ["\ud800", "tail \udfff"])
def test_a_message_with_a_lone_surrogate_is_rejected_as_not_text(message: str) -> None:
    with pytest.raises(RejectedCommand) as caught:
        parse_command(body(message))
    assert "not valid Unicode text" in caught.value.reason


COMMAND = ConverseCommand(type="converse", command_id="c-1", conversation_id="m-1", message="q2")


def test_the_contract_this_stage_speaks_is_version_1() -> None:
    """docs/CONTRACT.md is version 1: raising it is a change of the contract, made on purpose."""
    assert CONTRACT_VERSION == 1


def test_a_prompt_payload_carries_the_contract_version_first_after_its_type() -> None:
    window = bound_history(
        [HistoryMessage(2, "assistant", "a1"), HistoryMessage(1, "user", "q1")],
        Settings.at_defaults().window_limits,
    )
    view = render_converse(window, COMMAND.message, None)
    body = encode_body(prompt_payload(COMMAND, window, FoldState(), view))
    assert body.startswith('{"type":"prompt","contract":1,')


def test_a_fold_request_carries_the_contract_version_first_after_its_type() -> None:
    request = compaction_request(
        COMMAND, CompactionPlan(folded_through=0, through=2, unfolded_tokens=9)
    )
    assert encode_body(request).startswith('{"type":"compact","contract":1,')


@pytest.mark.parametrize("extra", [{"contract": 1}, {"contract": 2}, {"producer_trace": "x"}])
def test_a_command_with_fields_the_stage_does_not_know_is_taken_as_is(extra: dict) -> None:
    """A reader ignores fields it does not know: a producer's own, or a later contract's."""
    document = {"type": "converse", "command_id": "c-1", "conversation_id": "m-1", "message": "q"}
    command = parse_command(json.dumps(document | extra))
    assert command == ConverseCommand.model_validate(document)
