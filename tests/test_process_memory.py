"""Broker processes keep the memory they free for the next request
(``laketail.process_memory``): a burst of megabyte blocks, freed and made again, touches
fresh pages each time under glibc's default thresholds and reuses the same pages once
``keep_freed_memory`` fixed them. Counted in minor page faults, in a fresh interpreter
so this process's malloc is left as it was."""

import json
import subprocess
import sys

import pytest

CHILD = r"""
import json, resource, sys
from laketail.process_memory import keep_freed_memory

def faults_per_round():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        blocks = [bytes(bytearray(1 << 20)) for _ in range(8)]  # 8 MB alive, then freed
        del blocks
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10

faults_per_round()
default = faults_per_round()
kept = keep_freed_memory()
faults_per_round()  # the first round after the change grows the heap once
json.dump({"default": default, "kept": kept, "after": faults_per_round()}, sys.stdout)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_freed_megabytes_are_reused_without_page_faults() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
    seen = json.loads(out)
    assert seen["kept"] is True
    # 8 MB made per round: about 2,000 fresh pages each time by default ...
    assert seen["default"] > 1000
    # ... and next to none once the thresholds hold the freed blocks
    assert seen["after"] < 50
