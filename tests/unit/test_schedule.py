"""The order `make test`'s workers take the files in (tests/schedule.py): the longest first, a
new file by its directory's mean, and never a test more or less than was collected."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.schedule import Durations, longest_files_first, weights


@dataclass
class Item:
    nodeid: str


RECORDED = {
    "tests/integration/test_brownout.py": 160.0,
    "tests/integration/test_dlq.py": 40.0,
    "tests/unit/test_fast.py": 1.0,
    "tests/unit/test_hypothesis.py": 9.0,
}


def test_an_unrecorded_file_weighs_its_directorys_mean_or_else_the_overall_mean() -> None:
    files = ["tests/integration/test_new.py", "tests/unit/test_fast.py", "tests/infra/test_x.py"]
    assert weights(files, RECORDED) == {
        "tests/integration/test_new.py": 100.0,
        "tests/unit/test_fast.py": 1.0,
        "tests/infra/test_x.py": 52.5,
    }
    assert weights(files, {}) == dict.fromkeys(files, 0.0)


def test_files_go_longest_first_each_files_tests_in_their_order_none_lost() -> None:
    collected = [
        Item("tests/unit/test_fast.py::test_a"),
        Item("tests/unit/test_fast.py::test_b[1]"),
        Item("tests/unit/test_hypothesis.py::test_c"),
        Item("tests/integration/test_dlq.py::test_d"),
        Item("tests/integration/test_new.py::test_e"),
        Item("tests/integration/test_new.py::test_f"),
        Item("tests/integration/test_brownout.py::test_g"),
        Item("tests/integration/test_brownout.py::test_h"),
    ]
    items = list(collected)
    longest_files_first(items, RECORDED)  # type: ignore[arg-type]  # only .nodeid is read
    assert [item.nodeid for item in items] == [
        "tests/integration/test_brownout.py::test_g",
        "tests/integration/test_brownout.py::test_h",
        "tests/integration/test_new.py::test_e",
        "tests/integration/test_new.py::test_f",
        "tests/integration/test_dlq.py::test_d",
        "tests/unit/test_hypothesis.py::test_c",
        "tests/unit/test_fast.py::test_a",
        "tests/unit/test_fast.py::test_b[1]",
    ]


def test_stored_durations_add_each_files_phases_and_drop_the_files_that_are_gone(
    tmp_path: Path,
) -> None:
    record = tmp_path / "durations.json"
    record.write_text(
        json.dumps({"tests/unit/test_schedule.py": 3.0, "tests/unit/test_gone.py": 5.0})
    )
    durations = Durations()
    for phase, seconds in (("setup", 0.25), ("call", 2.0), ("teardown", 0.04)):
        report = pytest.TestReport(
            nodeid="bench/tests/test_model_bill.py::test_x",
            location=("bench/tests/test_model_bill.py", 0, "test_x"),
            keywords={},
            outcome="passed",
            longrepr=None,
            when=phase,
            duration=seconds,
        )
        durations.add(report)
    durations.store(record)
    assert json.loads(record.read_text()) == {
        "tests/unit/test_schedule.py": 3.0,
        "bench/tests/test_model_bill.py": 2.3,
    }
