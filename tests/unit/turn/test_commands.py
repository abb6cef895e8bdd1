"""Parsing the converse command: what is rejected, with which reason, and what is kept as is."""

from __future__ import annotations

import json

import pytest

from worker.errors import RejectedCommand
from worker.turn.commands import parse_command


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
