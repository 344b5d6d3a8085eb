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
from .support import Session, read_arrow, read_values, unique, wait_until
from .test_transactions_rest import COMMITTED, EVERYTHING, _txn_topic_with_an_abort

pytestmark = pytest.mark.integration


def _drop_hot_log(broker, topic: str) -> None:
    """A stopped broker's hot log of partition 0 gone (segments and producer snapshot),
    as a replica's that came back behind the tiered offset: it restarts empty there."""
    hot = Path(broker.data_dir) / "logs" / "broker-0" / f"{topic}-0"
    removed = [p for p in hot.iterdir() if p.suffix == ".log" or p.name.startswith("producer.")]
    assert any(p.suffix == ".log" for p in removed), sorted(hot.iterdir())
    for path in removed:
        path.unlink()


@pytest.mark.fault
def test_read_committed_below_a_restarted_hot_log_uses_the_tables_markers(broker_factory, make_topic):
    broker = broker_factory(env=TXN_ENV)
    topic, _ = _txn_topic_with_an_abort(broker, make_topic)

    def tiered() -> pa.Table | None:
        table = DeltaTable(str(broker.table_path(topic))).to_pyarrow_table()
        return table if table.num_rows == 9 else None

    wait_until(tiered, "all 9 rows (7 records, 2 markers) in the Delta table")
    broker.kill9()
    _drop_hot_log(broker, topic)  # it restarts empty at the tiered offset 9
    broker.restart()

    http = broker.rest.http
    assert read_values(http, topic, 0, "read_uncommitted") == EVERYTHING
    # On the old code the restarted log knew no markers: the aborted a1, a2 were shown.
    assert read_values(http, topic, 0, "read_committed") == COMMITTED
    assert read_arrow(http, topic, 0).column("offset").to_pylist() == [0, 4, 5, 6, 8]


@pytest.mark.fault
def test_an_open_transaction_below_a_restarted_hot_log_still_holds_read_committed_back(broker_factory, make_topic):
    """Its records are in the table and its marker is not written yet: the restarted
    log's producer state must know the transaction is open, or read_committed shows
    records that may still be aborted (the last stable offset stays at its first)."""
    broker = broker_factory(env=TXN_ENV)
    topic = make_topic(broker=broker)
    rest = broker.rest
    assert rest.produce_binary(topic, [{"value": b"plain-0"}], partition=0).status_code == 200
    session = Session(rest.http, unique("open"))
    assert session.begin().status_code == 200
    assert session.produce(topic, 0, [b"t1", b"t2"]).status_code == 200
    assert rest.produce_binary(topic, [{"value": b"plain-1"}], partition=0).status_code == 200

    def tiered() -> pa.Table | None:
        table = DeltaTable(str(broker.table_path(topic))).to_pyarrow_table()
        return table if table.num_rows == 4 else None

    wait_until(tiered, "the 4 records in the Delta table")
    broker.kill9()
    _drop_hot_log(broker, topic)
    broker.restart()

    http = broker.rest.http
    assert read_values(http, topic, 0, "read_uncommitted") == [b"plain-0", b"t1", b"t2", b"plain-1"]
    assert read_values(http, topic, 0, "read_committed") == [b"plain-0"]
    session = Session.adopt(http, session.transactional_id or "", session.producer_id, session.epoch)
    assert session.commit().status_code == 200
    assert read_values(http, topic, 0, "read_committed") == [b"plain-0", b"t1", b"t2", b"plain-1"]


@pytest.mark.fault
@pytest.mark.parametrize("stop", ["sigterm", "kill9"])
def test_an_idempotent_producer_continues_its_sequences_above_a_restarted_hot_log(broker_factory, make_topic, stop):
    """The producer's batches are only in the table after the restart: the hot log has no
    frames to rebuild its sequences from. Before, its next batch was refused
    OUT_OF_ORDER_SEQUENCE_NUMBER ("unknown here and its first sequence is 5, not 0"), a
    fatal error for Kafka's idempotent producer; Kafka rebuilds the state from its log.
    Now the leader learns each producer's last sequences from the table: the next batch
    is appended and a retry of the last one is answered with its original offsets."""
    broker = broker_factory(env=TXN_ENV)
    topic = make_topic(broker=broker)
    http = broker.rest.http
    session = Session(http)
    for values in ([b"a0", b"a1"], [b"b0", b"b1", b"b2"]):
        assert session.produce(topic, 0, values).status_code == 200

    def tiered() -> pa.Table | None:
        table = DeltaTable(str(broker.table_path(topic))).to_pyarrow_table()
        return table if table.num_rows == 5 else None

    wait_until(tiered, "the 5 records in the Delta table")
    if stop == "kill9":
        broker.kill9()
    else:
        assert broker.stop() is not None  # SIGTERM: a clean stop, not killed after the timeout
    _drop_hot_log(broker, topic)  # it restarts empty at the tiered offset 5
    broker.restart()

    http = broker.rest.http
    session.http = http
    retry = session.produce_at(topic, 0, [b"b0", b"b1", b"b2"], 2)  # the last batch again
    assert retry.status_code == 200, retry.text
    assert [o["offset"] for o in retry.json()["offsets"]] == [2, 3, 4]
    following = session.produce_at(topic, 0, [b"c0"], 5)
    assert following.status_code == 200, following.text
    assert [o["offset"] for o in following.json()["offsets"]] == [5]
    gap = session.produce_at(topic, 0, [b"x"], 9)
    assert gap.status_code == 409 and "OUT_OF_ORDER_SEQUENCE_NUMBER" in gap.json()["message"], gap.text
    assert read_values(http, topic, 0, "read_uncommitted") == [b"a0", b"a1", b"b0", b"b1", b"b2", b"c0"]
