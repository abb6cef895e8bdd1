"""docs/CONTRACT.md says what the code does: the fields of the command, the prompt payload and
the fold request, the settings and their defaults, and the stored attributes the stage reads and
writes. The other stages' teams implement against the page, so a field the code sends and the
page does not name (or the reverse) fails here. The rights table is checked against the stack's
template in tests/infra/test_contract_rights.py.
"""

from __future__ import annotations

import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import PydanticUndefined

from localaws.bedrock_cache import STAND_IN_MODEL_ID
from tests import contract_page as page
from tests.conftest import settings as make_settings
from tests.infra.cfn_outputs import RESOURCE_VARIABLES
from worker.adapters.stored_attributes import ATTRIBUTES, THIS_STAGE
from worker.memory import CompactionPlan, FoldState, HistoryMessage
from worker.planning import plan_turn
from worker.ports import HistoryPage
from worker.settings import Settings
from worker.turn.commands import (
    CONTRACT_VERSION,
    ConverseCommand,
    compaction_request,
    prompt_payload,
)

COMMAND = ConverseCommand(
    type="converse",
    command_id="c-8f2e",
    conversation_id="matter-1187",
    message="What does clause 14.2 say about termination?",
    sent_at="2026-11-30T09:00:00Z",
)
AT = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
#: A summary whose prefix reaches the cache's minimum, so the view's points expect reads.
SUMMARY = "The lease, its clause 14.2, and the notice served. ".ljust(4 * 1_200, "s")


def built_payload() -> dict[str, Any]:
    """A prompt payload as the stage builds it, with every optional part present: a fold
    summary (``memory``), and the cache-aligned view's points (``cache``)."""
    messages: list[HistoryMessage] = []
    for i in range(20):
        at = AT - timedelta(minutes=40 - 2 * i)
        messages += [
            HistoryMessage(2 * i + 1, "user", f"Question {i}? ".ljust(400, "q"), created_at=at),
            HistoryMessage(2 * i + 2, "assistant", f"Answer {i}. ".ljust(400, "a")),
        ]
    history = HistoryPage(
        state=FoldState(folded_through=10, summary=SUMMARY), messages=tuple(reversed(messages))
    )
    config = make_settings(
        history_window_mode="cache-aligned", model_id=STAND_IN_MODEL_ID
    ).plan_config
    plan = plan_turn(history, COMMAND.message, sent_at=AT, config=config)
    payload = prompt_payload(
        COMMAND, plan.window, history.state, plan.view,
        shown=(plan.summary, plan.folded_through), cache=plan.cache,
    )  # fmt: skip
    assert payload["memory"] is not None and "cache" in payload, "every part must be present"
    return payload


def built_request() -> dict[str, Any]:
    return dict(compaction_request(COMMAND, CompactionPlan(120, 142, 2350)))


def point_fields(block: dict[str, Any]) -> set[str]:
    """The fields of a cache point: of ``block`` itself when it is one, else of each point of a
    ``cache`` block, which must all have the same."""
    if "points" not in block:
        return set(block)
    [fields] = {frozenset(point) for point in block["points"]}
    return set(fields)


def field_column(heading: str) -> set[str]:
    """The names in the ``field`` column of a section's field table (a cell may name several)."""
    return {name for row in page.table(heading, "field") for name in page.code_spans(row["field"])}


# --- the wire formats -------------------------------------------------------------------------


def test_the_command_example_and_table_name_exactly_the_fields_the_command_reads() -> None:
    fields = set(ConverseCommand.model_fields)
    assert set(page.example("The converse command", "converse")) == fields
    assert field_column("The converse command") == fields


def test_the_prompt_payload_example_has_exactly_the_fields_the_stage_sends() -> None:
    built = built_payload()
    shown = page.example("The prompt payload", "prompt")
    assert set(shown) == set(built)
    for part in ("memory", "window", "cache", "converse"):
        assert set(shown[part]) == set(built[part]), part
    assert shown["cache"]["points"] and shown["history"]
    assert all(point_fields(p) == point_fields(built["cache"]) for p in shown["cache"]["points"])
    assert all(set(m) == set(built["history"][0]) for m in shown["history"])


def test_the_prompt_payload_table_names_each_top_level_and_window_field() -> None:
    built = built_payload()
    expected = (set(built) - {"window"}) | {f"window.{name}" for name in built["window"]}
    assert field_column("The prompt payload") == expected


def test_the_cache_example_has_exactly_the_fields_of_the_payloads_cache() -> None:
    built = built_payload()["cache"]
    [shown] = page.section("What the stage expects of the cache (`cache`)").examples
    assert set(shown) == set(built)
    assert shown["points"]
    assert all(point_fields(p) == point_fields(built) for p in shown["points"])


def test_the_cache_section_lists_each_field_of_the_cache_block() -> None:
    text = page.section("What the stage expects of the cache (`cache`)").text
    listed = {m.group(1) for m in re.finditer(r"^- `(\w+)`", text, re.MULTILINE)}
    assert listed == set(built_payload()["cache"])


def test_the_fold_request_example_and_table_name_exactly_the_fields_the_stage_sends() -> None:
    built = built_request()
    assert set(page.example("The compaction request", "compact")) == set(built)
    assert field_column("The compaction request") == set(built)


@pytest.mark.parametrize(
    ("heading", "type_"), [("The prompt payload", "prompt"), ("The compaction request", "compact")]
)
def test_each_example_of_what_the_stage_sends_carries_the_contract_version(
    heading: str, type_: str
) -> None:
    assert page.example(heading, type_)["contract"] == CONTRACT_VERSION
    built = built_payload() if type_ == "prompt" else built_request()
    assert built["contract"] == CONTRACT_VERSION


def test_the_versioning_section_states_the_version_the_code_sends() -> None:
    assert f'`"contract": {CONTRACT_VERSION}`' in page.section("Versioning").text


# --- the configuration ------------------------------------------------------------------------

TEMP_DIRECTORY = " in the temp directory"


def stated_default(cell: str) -> object:
    """The default a cell states: ``required``, ``unset``, a number, a ``code`` literal (the
    first, when the cell says more), or a ``file name`` in the temp directory."""
    if cell == "required":
        return PydanticUndefined
    if cell == "unset":
        return None
    if re.fullmatch(r"[\d,]+(\.\d+)?", cell):
        return float(cell.replace(",", ""))
    if cell.endswith(TEMP_DIRECTORY):
        [name] = page.code_spans(cell.removesuffix(TEMP_DIRECTORY))
        return str(Path(tempfile.gettempdir()) / name)
    literal = page.code_spans(cell)
    assert literal and cell.startswith("`"), f"a default the test cannot read: {cell!r}"
    return literal[0]


def configuration() -> dict[str, str]:
    rows = page.table("Configuration", "variable")
    names = [page.code_spans(row["variable"]) for row in rows]
    assert all(len(n) == 1 for n in names), "one variable a row"
    return {n[0]: row["default"] for n, row in zip(names, rows, strict=True)}


def test_every_variable_of_the_configuration_table_is_a_setting_with_the_stated_default() -> None:
    fields = Settings.model_fields
    for name, cell in configuration().items():
        assert name.lower() in fields, f"{name} is not a setting of worker/settings.py"
        default = fields[name.lower()].default
        stated = stated_default(cell)
        if isinstance(stated, float):
            assert isinstance(default, int | float) and float(default) == stated, name
        else:
            assert default == stated, name


def test_every_setting_the_page_names_is_in_its_configuration_table() -> None:
    """A setting named anywhere on the page is one of the contract's: its default is stated."""
    settings = {name.upper() for name in Settings.model_fields}
    named = page.every_code_span() & settings
    assert named - set(configuration()) == set()


def test_the_configuration_table_holds_every_variable_a_neighbour_depends_on() -> None:
    """The queues, the tables, the bucket (the variables every deployment gives the worker),
    the window and the fold: what the other stages' deployments set or rely on."""
    assert {
        *RESOURCE_VARIABLES,
        "PAYLOAD_INLINE_MAX_BYTES",
        "HISTORY_WINDOW_MAX_TOKENS",
        "HISTORY_WINDOW_MAX_MESSAGES",
        "HISTORY_WINDOW_FLOOR_MESSAGES",
        "HISTORY_MESSAGE_MAX_TOKENS",
        "MEMORY_FOLD_MIN_TOKENS",
        "HISTORY_WINDOW_MODE",
    } <= set(configuration())


def test_the_default_reader_refuses_a_cell_it_cannot_read() -> None:
    """The default check cannot pass on prose: a cell that is no default it knows fails."""
    with pytest.raises(AssertionError, match="cannot read"):
        stated_default("the implementation's")


# --- the history table ------------------------------------------------------------------------


def declared(item: str, *, writer: str | None = None) -> set[str]:
    """The top-level attribute names worker/adapters/stored_attributes.py declares."""
    return {
        a.name.split(".")[-1 if item != "bill" else 1].split("[")[0]
        for a in ATTRIBUTES
        if a.item == item and (writer is None or a.writer == writer)
    }


def history_row(item: str) -> set[str]:
    [row] = [r for r in page.table("The history table", "item") if r["item"] == item]
    return set(page.code_spans(row["attributes"]))


def test_the_state_row_names_every_state_attribute_the_reader_declares() -> None:
    assert declared("state") <= history_row("conversation state")


def test_the_message_row_names_every_message_attribute_the_reader_declares() -> None:
    assert declared("message") - {"sk"} <= history_row("message")


def test_the_bill_table_names_every_member_of_model_usage_the_reader_declares() -> None:
    rows = page.table("The bill, observed", "member")
    members = {name for row in rows for name in page.code_spans(row["member"])}
    assert members == declared("bill")


def test_the_rights_on_the_history_table_are_the_state_attributes_this_stage_writes() -> None:
    """The stage's UpdateItem on the history table reaches its own attributes of `state`, no
    more: the rights table names exactly those the reader declares as written by this stage."""
    rows = page.table("Resources and rights", "resource", "owner")
    [row] = [r for r in rows if r["resource"] == "history table"]
    rights = set(page.code_spans(row["the stage's rights"])) - {"Query", "UpdateItem", "state"}
    assert rights == declared("state", writer=THIS_STAGE)


# --- pointers to the page ---------------------------------------------------------------------

ROOT = page.PAGE.parents[1]
#: A docstring's pointer to a section: ``docs/CONTRACT.md``, "The window rules".
_CITED = re.compile(r'docs/CONTRACT\.md`*\)?, "([^"]+)"')
#: A markdown link to a section: ``](CONTRACT.md#the-window-rules)`` elsewhere, ``](#…)`` on
#: the page itself.
_LINKED = re.compile(r"\]\([./\w]*CONTRACT\.md#([\w-]+)\)")
_LINKED_HERE = re.compile(r"\]\(#([\w-]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub renders it: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def sources(*patterns: str) -> list[Path]:
    return sorted(path for pattern in patterns for path in ROOT.glob(pattern))


def test_every_section_cited_in_the_code_is_a_section_of_the_page() -> None:
    headings = list(page.sections())
    cited = {
        (path.relative_to(ROOT), name)
        for path in sources("worker/**/*.py", "bench/**/*.py", "localaws/**/*.py")
        for name in _CITED.findall(path.read_text())
    }
    assert cited, "the scan found no citation at all"
    assert {(p, n) for p, n in cited if not any(h.startswith(n) for h in headings)} == set()


def test_every_link_to_a_section_of_the_page_has_its_heading() -> None:
    anchors = {slug(heading) for heading in page.sections()}
    linked = {
        (path.relative_to(ROOT), anchor)
        for path in sources("README.md", "docs/**/*.md")
        for anchor in (_LINKED_HERE if path == page.PAGE else _LINKED).findall(path.read_text())
    }
    assert {p for p, _ in linked} > {Path("docs/CONTRACT.md")}, "links here and elsewhere"
    assert {(p, a) for p, a in linked if a not in anchors} == set()


def test_no_file_points_to_the_shared_folder_outside_the_repository() -> None:
    outside = "../" + "shared"  # spelled apart, so this file does not name it
    pointing = [
        path.relative_to(ROOT)
        for path in sources("*.md", "docs/**/*.md", "worker/**/*.py", "bench/**/*.py",
                            "localaws/**/*.py", "tests/**/*.py", "infra/**/*.yaml")
        if outside in path.read_text()
    ]  # fmt: skip
    assert pointing == []
