"""The heap start-up built is out of the collector's sight before the first receive."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from worker.app.startup import settle_heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class Built:
    """An object start-up made and keeps."""


def test_what_start_up_built_is_frozen_and_a_full_collection_walks_only_what_came_after(
    unfrozen: None,
) -> None:
    kept = [Built() for _ in range(1_000)]
    settle_heap()
    later = [Built() for _ in range(10)]
    walked = {id(o) for o in gc.get_objects() if isinstance(o, Built)}
    assert gc.get_freeze_count() > len(kept)
    assert walked == {id(o) for o in later}
