"""`worker send` reads counsel's message from stdin: what it keeps, what it drops, what it
refuses, and the prompt a terminal gets."""

from __future__ import annotations

import io

import pytest

from worker.cli.send import read_message


class Stdin(io.TextIOWrapper):
    def __init__(self, data: bytes, *, tty: bool) -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"q?\n", "q?"),
        (b"q?\r\n", "q?"),
        (b"q?", "q?"),
        (b"q?\n\n", "q?\n"),  # one line end dropped, no more
        (b"  first line\n\tsecond \n", "  first line\n\tsecond "),
        ("résiliation — 14.2\n".encode(), "résiliation — 14.2"),
    ],
)
def test_one_trailing_line_end_is_dropped_and_every_other_character_kept(
    data: bytes, message: str
) -> None:
    assert read_message(Stdin(data, tty=False)) == message


def test_a_terminal_is_told_how_to_end_the_message_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert read_message(Stdin(b"q?\n", tty=True)) == "q?"
    assert capsys.readouterr() == (
        "",
        "worker: reading the message from stdin; end it with Ctrl-D\n",
    )


def test_a_pipe_gets_no_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    read_message(Stdin(b"q?", tty=False))
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", "the message on stdin is blank: nothing to send"),
        (b" \n", "the message on stdin is blank: nothing to send"),
        (b"PRIVILEGED \xff", "the message on stdin is not UTF-8 text"),
    ],
)
def test_a_blank_or_undecodable_message_is_refused_naming_no_content(
    data: bytes, error: str
) -> None:
    with pytest.raises(ValueError, match=f"^{error}$"):
        read_message(Stdin(data, tty=False))
