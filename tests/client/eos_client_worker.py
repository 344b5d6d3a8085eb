"""confluent-kafka's exactly-once loop on laketail's Python client, as a process to be
killed with SIGKILL at any moment.

``python eos_client_worker.py URL INPUT OUTPUT GROUP TRANSACTIONAL_ID [--batch N]``

A group consumer (read_committed, no auto-commit) subscribes to INPUT; a producer
with TRANSACTIONAL_ID inits its transactions (fencing the previous incarnation and
aborting its open transaction). Then, per batch of up to N records: begin; produce
``b"out:" + value`` to the same partition of OUTPUT; send the consumer's positions to
the transaction; commit. An error that requires an abort (a rebalance made the
group metadata stale, ...) aborts and rewinds to the committed offsets. The worker
exits 0 once GROUP's committed offsets reach INPUT's end offsets; any other error
ends it with a traceback and a non-zero code.
"""

from __future__ import annotations

import argparse
import sys

from laketail.client import Consumer, KafkaException, Producer, TopicPartition


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("url", "input", "output", "group", "transactional_id"):
        parser.add_argument(name)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args(argv)

    consumer = Consumer({
        "bootstrap.servers": args.url, "group.id": args.group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "session.timeout.ms": 1000, "heartbeat.interval.ms": 100,
    })
    producer = Producer({"bootstrap.servers": args.url, "transactional.id": args.transactional_id})
    producer.init_transactions()
    partitions = sorted(consumer.list_topics(args.input).topics[args.input].partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(args.input, p))[1] for p in partitions}
    print(f"started; input ends at {ends}", flush=True)
    consumer.subscribe([args.input])

    def finished() -> bool:
        committed = consumer.committed([TopicPartition(args.input, p) for p in partitions])
        return all(tp.offset >= ends[tp.partition] for tp in committed)

    while not finished():
        batch = consumer.consume(num_messages=args.batch, timeout=0.5)
        for msg in batch:
            if msg.error() is not None:
                raise KafkaException(msg.error())
        if not batch:
            continue
        producer.begin_transaction()
        try:
            for msg in batch:
                producer.produce(args.output, b"out:" + msg.value(), partition=msg.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata())
            producer.commit_transaction()
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise
            print(f"aborting: {exc}", flush=True)
            producer.abort_transaction()
            for tp in consumer.committed(consumer.assignment()):
                consumer.seek(tp)
    print("done", flush=True)
    consumer.close()
    producer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
