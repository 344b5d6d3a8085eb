"""File compaction: small table files of a partition merged into target-sized ones.

The tierer writes one file per partition per flush, so a busy topic's table fills with
small files. :func:`plan_file_compaction` picks, per partition and in offset order,
runs of adjacent files whose sizes add up to at most ``target_file_bytes``; each run of
at least ``min_files`` files becomes one output file. A file at or above the target is
left alone and ends the run before it.

Only whole files the Delta snapshot lists are planned. The rewrite keeps every row as
it is (offsets included), so consumer positions and stream offsets stay valid, and it
is committed as ``remove`` + ``add`` with ``dataChange=false``. The tierer only ever
appends files above the snapshot's last one, so a concurrent tier commit never
conflicts with a compaction commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from laketail.storage.table_reader import DataFile

DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class FileCompactionPlan:
    """Adjacent files of one partition to rewrite as one file."""

    partition: int
    inputs: tuple[DataFile, ...]

    @property
    def first_offset(self) -> int:
        return self.inputs[0].first_offset

    @property
    def last_offset(self) -> int:
        return self.inputs[-1].last_offset

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.inputs)

    @property
    def num_records(self) -> int:
        return sum(f.num_records for f in self.inputs)


def plan_file_compaction(
    files: Mapping[int, Sequence[DataFile]],
    *,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    min_files: int = 2,
    exclude: frozenset[str] = frozenset(),
) -> list[FileCompactionPlan]:
    """Runs of small adjacent files to merge, per partition (greedy, oldest first).

    ``exclude`` names files (by path) that another plan of the same pass rewrites
    already (key compaction); they end a run like a large file does."""
    if target_file_bytes < 1:
        raise ValueError(f"target_file_bytes must be positive, got {target_file_bytes}")
    min_files = max(min_files, 2)
    plans: list[FileCompactionPlan] = []

    def close_run(partition: int, run: list[DataFile]) -> None:
        if len(run) >= min_files:
            plans.append(FileCompactionPlan(partition, tuple(run)))

    for partition in sorted(files):
        run: list[DataFile] = []
        run_bytes = 0
        for data_file in sorted(files[partition]):
            small = data_file.size_bytes < target_file_bytes and data_file.path not in exclude
            if small and run_bytes + data_file.size_bytes <= target_file_bytes:
                run.append(data_file)
                run_bytes += data_file.size_bytes
                continue
            close_run(partition, run)
            run, run_bytes = ([data_file], data_file.size_bytes) if small else ([], 0)
        close_run(partition, run)
    return plans
