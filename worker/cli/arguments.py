"""Argument types of the command line: each refuses a bad value with the one line argparse
prints (after the usage), before anything is imported or called. Imports argparse only."""

from __future__ import annotations

import argparse

#: ``worker dlq redrive --rate``, messages a second: SQS's move task takes 1 to 500
#: (``MaxNumberOfMessagesPerSecond``), and the receive-send-delete loop keeps to the same.
MIN_RATE, MAX_RATE = 1, 500


def redrive_rate(text: str) -> int:
    """A whole number of messages a second from MIN_RATE to MAX_RATE."""
    rate = _whole_number(text)
    if rate is None or not MIN_RATE <= rate <= MAX_RATE:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of messages a second from {MIN_RATE} to {MAX_RATE} "
            f"(SQS's move task takes no more), not {text!r}"
        )
    return rate


def positive_count(text: str) -> int:
    """A whole number from 1."""
    count = _whole_number(text)
    if count is None or count < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1, not {text!r}")
    return count


#: A conversation id's length, as the contract bounds it.
MAX_CONVERSATION_ID = 256


def conversation_id(text: str) -> str:
    """A conversation id as the contract takes it: 1 to 256 characters."""
    if not 1 <= len(text) <= MAX_CONVERSATION_ID:
        raise argparse.ArgumentTypeError(
            f"must be a conversation id of 1 to {MAX_CONVERSATION_ID} characters"
        )
    return text


def add_conversation(parser: argparse.ArgumentParser) -> None:
    """The ``--conversation ID`` every command about one conversation takes."""
    parser.add_argument(
        "--conversation",
        required=True,
        type=conversation_id,
        help="the conversation (matter) id",
    )


def _whole_number(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
