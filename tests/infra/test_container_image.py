"""What docs/DEPLOY.md says of the image reference is what the ContainerImage parameter takes:
each row of its table of examples (section 1, below ``<!-- container-image-examples -->``) is
taken, or refused, by the parameter's AllowedPattern as the row says; and each taken one gives
the execution role the pull grant on its own repository."""

from __future__ import annotations

import re

import pytest

from tests.infra.cfn_stack import ConcreteStack
from tests.infra.cfn_yaml import REPO_ROOT, load_template

DEPLOY = REPO_ROOT / "docs" / "DEPLOY.md"
MARKER = "<!-- container-image-examples -->"
DIGEST = "sha256:" + "0123456789abcdef" * 4
ROW = re.compile(r"^\| `(?P<image>[^`]+)` \| (?P<taken>yes|no) \| (?P<why>.+) \|$")


def documented() -> list[tuple[str, bool, str]]:
    """The table's rows: (image, taken, why), ``<digest>`` made a digest."""
    text = DEPLOY.read_text(encoding="utf-8")
    table = text.split(MARKER, 1)[1].strip().split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        match = ROW.match(line)
        assert match is not None, f"not a row of the table: {line!r}"
        image = match["image"].replace("sha256:<digest>", DIGEST)
        rows.append((image, match["taken"] == "yes", match["why"]))
    return rows


ROWS = documented()


def test_the_table_shows_both_what_is_taken_and_what_is_refused() -> None:
    assert sum(taken for _, taken, _ in ROWS) >= 3
    assert sum(not taken for _, taken, _ in ROWS) >= 3


@pytest.mark.parametrize(("image", "taken", "why"), ROWS, ids=[why for _, _, why in ROWS])
def test_the_parameter_takes_what_the_page_says_it_takes(image: str, taken: bool, why: str) -> None:
    pattern = load_template()["Parameters"]["ContainerImage"]["AllowedPattern"]
    assert (re.fullmatch(pattern, image) is not None) is taken, why


@pytest.mark.parametrize(
    "image", [image for image, taken, _ in ROWS if taken], ids=lambda image: image.split("/", 1)[1]
)
def test_each_image_taken_gives_a_pull_grant_on_its_own_repository(image: str) -> None:
    registry, rest = image.split("/", 1)
    account, _, _, region = registry.split(".")[:4]
    repository = re.split(r"[:@]", rest, maxsplit=1)[0]
    stack = ConcreteStack(parameters={"ContainerImage": image})
    role = stack.resolve(stack.template["Resources"]["TaskExecutionRole"]["Properties"])
    (policy,) = role["Policies"]
    (pull,) = [
        s for s in policy["PolicyDocument"]["Statement"] if "ecr:BatchGetImage" in s["Action"]
    ]
    assert pull["Resource"] == f"arn:aws:ecr:{region}:{account}:repository/{repository}"
