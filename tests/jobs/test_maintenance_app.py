"""The maintenance application: one Structured Streaming query, driven by the topics'
table commits, compacts small files with rewrites on Spark's executors and changes no
record; a later commit drives the next pass on the same checkpoint."""

from __future__ import annotations

import pytest

from laketail.jobs import maintenance

from .support import TABLE_ONLY, fetch_all, produce_rounds, run_job, table_files

pytestmark = pytest.mark.integration


def test_table_commits_drive_compaction_on_executors(spark, broker, make_topic, tmp_path):
    topic = make_topic(1, TABLE_ONLY)
    produce_rounds(broker, topic, 1, rounds=4, per_round=10)
    assert len(table_files(broker, topic, 1)[0]) == 4
    before = fetch_all(broker, topic, 0)
    checkpoint = str(tmp_path / "checkpoint")
    argv = ["--data", str(broker.data_dir), "--servers", broker.url, "--topic", topic,
            "--checkpoint", checkpoint, "--interval-s", "0.5", "--max-rounds", "1"]

    reports = run_job(maintenance.main, *argv)
    # Maintenance's own commit moves the table's version, so a second micro-batch may
    # start before --max-rounds stops the query; it finds nothing left to do. The first
    # batch is the one that compacts.
    first = reports[: next(i for i, r in enumerate(reports) if r.get("job") == "maintenance") + 1]
    compaction = [r for r in first if r.get("job") == "compaction"]
    assert [r["topic"] for r in compaction] == [topic]
    assert first[-1]["topics"] == [topic]
    assert len(table_files(broker, topic, 1)[0]) == 1  # four small files became one
    assert fetch_all(broker, topic, 0) == before

    # More commits: the same query (checkpoint) runs again and compacts them too.
    produce_rounds(broker, topic, 1, rounds=2, per_round=10)
    assert len(table_files(broker, topic, 1)[0]) == 3
    reports = run_job(maintenance.main, *argv)
    assert reports[-1]["topics"] == [topic]
    assert len(table_files(broker, topic, 1)[0]) == 1
    assert [o for o, _, _ in fetch_all(broker, topic, 0)] == list(range(60))
