"""Typed columns in Spark: the SQL views of a topic with ``laketail.table.mode`` expose
``value_struct``, so ``SELECT value_struct.amount`` needs no ``from_avro``: the views
over laketail's JVM relation (live) and the file-list views alike."""

from __future__ import annotations

from typing import Any

import pytest

from laketail.spark import jvm, register_topics
from laketail.spark import sql as sql_module
from tests.schemas.test_typed_columns import ORDER_V1, TYPED, _produce_avro
from tests.spark.support import wait_tiered


@pytest.mark.parametrize("live", [True, False], ids=["jvm", "file-lists"])
def test_sql_views_expose_the_typed_value(spark: Any, broker: Any, make_topic: Any, monkeypatch: Any,
                                          live: bool) -> None:
    if live and jvm.jar() is None:
        pytest.skip("the laketail jar is not built (no javac)")
    topic = make_topic(configs=TYPED)
    _produce_avro(broker.rest, topic, ORDER_V1, [{"id": "o-1", "amount": 1.5}, {"id": "o-2", "amount": 2.5}])
    assert broker.rest.produce_binary(topic, [{"value": b"raw", "partition": 0}]).status_code == 200
    wait_tiered(broker.url, topic)
    if not live:
        monkeypatch.setattr(sql_module.jvm, "attach", lambda spark: False)
    register_topics(spark, broker.url, [topic], follow=False)
    rows = spark.sql(f"SELECT offset, value_struct.id, value_struct.amount FROM `{topic}` ORDER BY offset").collect()
    assert [tuple(r) for r in rows] == [(0, "o-1", 1.5), (1, "o-2", 2.5), (2, None, None)]
    total = spark.sql(f"SELECT sum(value_struct.amount) AS s FROM `{topic}_all`").collect()[0].s
    assert total == 4.0
    plan = spark.table(f"`{topic}`")._jdf.queryExecution().executedPlan().toString()
    assert ("TopicFileIndex" in plan) is live
