"""The compaction job refuses an object-store root with a clear error, before it reads
or writes anything: it stages rewrites in a local folder and moves them in by rename."""

from __future__ import annotations

import pytest

from laketail.config import TopicConfig
from laketail.errors import InvalidConfig
from laketail.maintenance.runs import run_compaction
from laketail.maintenance.topics import MaintainedTopic


def test_compaction_job_refuses_an_object_store_root(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    topic = MaintainedTopic("t", 1, TopicConfig())
    with pytest.raises(InvalidConfig, match="object store") as caught:
        run_compaction("s3://no-such-bucket/root", topic, 0, target_file_bytes=1 << 20)
    assert caught.value.kafka_name == "INVALID_CONFIG"
    assert list(tmp_path.iterdir()) == []  # no local s3: folder, nothing staged
