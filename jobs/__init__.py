"""Spark jobs (compaction, retention, lag, exactly-once pipelines); each also runs with spark-submit."""
