"""``laketail serve`` settles its startup heap before serving: frozen out of the
collector's way, with a larger young generation (bench/README.md, "The lean produce
path"). The test restores the interpreter's own settings afterwards."""

import gc

from laketail.cli.serve import GC_YOUNG_THRESHOLD, _settle_heap


def test_the_startup_heap_is_frozen_and_young_collections_are_rarer() -> None:
    before = gc.get_threshold()
    try:
        _settle_heap()
        assert gc.get_freeze_count() > 1000  # the imported modules, at least
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        cycle: list = []
        cycle.append(cycle)  # a reference cycle made after the freeze is still collected
        del cycle
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
