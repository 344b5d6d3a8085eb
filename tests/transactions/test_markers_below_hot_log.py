"""A replica whose hot log restarted above the table's end (it came back behind the
tiered offset, or was reset to the leader's hot start) has no frames to rebuild the
transaction markers below it from: read_committed must still judge those records by
their own markers, which the table holds (issue 35: the Jepsen-style run's committed
transactions invisible and aborted ones visible after a broker restart)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from .conftest import TXN_ENV
from .support import read_arrow, read_values, wait_until
from .test_transactions_rest import COMMITTED, EVERYTHING, _txn_topic_with_an_abort

pytestmark = pytest.mark.integration


def test_read_committed_below_a_restarted_hot_log_uses_the_tables_markers(broker_factory, make_topic):
    broker = broker_factory(env=TXN_ENV)
    topic, _ = _txn_topic_with_an_abort(broker, make_topic)

    def tiered() -> pa.Table | None:
        table = DeltaTable(str(broker.table_path(topic))).to_pyarrow_table()
        return table if table.num_rows == 9 else None

    wait_until(tiered, "all 9 rows (7 records, 2 markers) in the Delta table")
    broker.kill9()
    hot = Path(broker.data_dir) / "logs" / "broker-0" / f"{topic}-0"
    removed = [p for p in hot.iterdir() if p.suffix == ".log" or p.name.startswith("producer.")]
    assert any(p.suffix == ".log" for p in removed), sorted(hot.iterdir())
    for path in removed:  # the hot log is gone: it restarts empty at the tiered offset 9
        path.unlink()
    broker.restart()

    http = broker.rest.http
    assert read_values(http, topic, 0, "read_uncommitted") == EVERYTHING
    # On the old code the restarted log knew no markers: the aborted a1, a2 were shown.
    assert read_values(http, topic, 0, "read_committed") == COMMITTED
    assert read_arrow(http, topic, 0).column("offset").to_pylist() == [0, 4, 5, 6, 8]
