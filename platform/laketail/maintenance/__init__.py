"""Maintenance plans (compaction, retention, lag) as pure functions, executed by the
broker for its internal topics and by the Spark jobs for user topics."""
