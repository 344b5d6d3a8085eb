"""The object store down for a minute under steady produce (issue 40): an opt-in soak,
not part of ``make test``.

``python -m bench.outage`` (``make outage-soak``) starts moto, the fault proxy of the
object-store tests in front of it (``tests/object_store/fault_proxy.py``) and a broker on
``s3://bench-lake/root`` through the proxy, creates a topic with a small
``local.retention.bytes``, and produces to it at a steady rate (REST, acks=all, one
record per request, each partition in turn) before, during and after an outage of
``--outage-seconds`` (60) in which the proxy drops every connection. It checks what
issue 40 asks:

* acknowledgements keep coming from the hot tier during the outage, until the untiered
  bytes of a partition pass ``local.retention.bytes``;
* then produce is refused with KAFKA_STORAGE_ERROR (503, ``error_code`` 50307): never a
  hang (a request without an answer within ``REQUEST_TIMEOUT_S``) and never another error;
* once the store answers, produce is accepted again and tiering catches up;
* the table ends with every acknowledged record once and no refused one.

It prints a JSON summary (acks and refusals per phase, when the first refusal came,
how long recovery and catch-up took) and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.object_store import BUCKET, S3_ENV, MotoServer, S3LaketailServer
from tests.object_store.fault_proxy import FaultProxy

TOPIC = "outage"
PARTITIONS = 2
VALUE_BYTES = 1000
#: A produce request unanswered this long counts as a hang.
REQUEST_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 300.0


class SteadyProducer(threading.Thread):
    """Produces one record per request at ``rate`` requests per second, partitions in
    turn, and keeps what was acknowledged and what each answer was, by phase."""

    def __init__(self, url: str, rate: float) -> None:
        super().__init__(daemon=True, name="steady-producer")
        self.url = url
        self.interval = 1.0 / rate
        self.phase = "before"
        self.acked: dict[tuple[int, int], bytes] = {}
        self.answers: Counter[tuple[str, str]] = Counter()  # (phase, status or error code)
        self.first_refusal_s: float | None = None
        self.outage_started = 0.0
        self.first_accept_after_s: float | None = None
        self.store_back = 0.0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def run(self) -> None:
        n = 0
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            next_at = time.monotonic()
            while not self._halt.is_set():
                partition, value = n % PARTITIONS, f"{n}".encode().ljust(VALUE_BYTES, b".")
                n += 1
                phase = self.phase
                try:
                    resp = client.post(f"{self.url}/topics/{TOPIC}/partitions/{partition}?acks=all",
                                       content=json.dumps({"records": [{"value": _b64(value)}]}).encode(),
                                       headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
                except httpx.TimeoutException:
                    self.answers[(phase, "hang")] += 1
                    continue
                if resp.status_code == 200:
                    self.acked[(partition, resp.json()["offsets"][0]["offset"])] = value
                    self.answers[(phase, "200")] += 1
                    if phase == "after" and self.first_accept_after_s is None:
                        self.first_accept_after_s = time.monotonic() - self.store_back
                else:
                    code = str(resp.json().get("error_code", resp.status_code))
                    self.answers[(phase, f"{resp.status_code}/{code}")] += 1
                    if phase == "outage" and self.first_refusal_s is None:
                        self.first_refusal_s = time.monotonic() - self.outage_started
                next_at += self.interval
                time.sleep(max(next_at - time.monotonic(), 0.0))


def _b64(value: bytes) -> str:
    import base64

    return base64.b64encode(value).decode()


def _table(store: MotoServer) -> dict[tuple[int, int], bytes]:
    from deltalake import DeltaTable

    options = {**{k.lower(): v for k, v in S3_ENV.items()}, "aws_endpoint_url": store.url}
    out: dict[tuple[int, int], bytes] = {}
    rows = DeltaTable(f"s3://{BUCKET}/root/topics/{TOPIC}", storage_options=options).to_pyarrow_table(
        columns=["partition", "offset", "value"]).to_pylist()
    for row in rows:
        key = (row["partition"], row["offset"])
        out[key] = row["value"] if key not in out else b"<twice>"
    return out


def run(args: argparse.Namespace, workdir: Path) -> dict:
    store = MotoServer(workdir / "moto").start()
    proxy = FaultProxy(store.url).start()
    broker = S3LaketailServer(workdir / "laketail-s3", store, proxy.endpoint)
    producer: SteadyProducer | None = None
    try:
        broker.start(timeout_s=180.0)
        broker.create_topic(TOPIC, PARTITIONS, {"table.flush.interval.ms": "1000",
                                                "local.retention.bytes": str(args.local_retention_bytes)})
        producer = SteadyProducer(broker.url, args.rate)
        producer.start()
        time.sleep(args.before_seconds)
        producer.outage_started = time.monotonic()
        producer.phase, proxy.mode = "outage", "down"
        time.sleep(args.outage_seconds)
        producer.store_back = time.monotonic()
        producer.phase, proxy.mode = "after", "pass"
        time.sleep(args.after_seconds)
        producer.stop()
        started = time.monotonic()
        while True:  # every acknowledged record in the table, or the deadline
            table = _table(store)
            if len(table) >= len(producer.acked) or time.monotonic() - started > DRAIN_TIMEOUT_S:
                break
            time.sleep(1.0)
        caught_up_s = time.monotonic() - producer.store_back
        answers = {f"{phase} {answer}": n for (phase, answer), n in sorted(producer.answers.items())}
        outage_other = [a for (phase, a) in producer.answers if phase == "outage" and a not in ("200", "503/50307")]
        checks = {
            "acks during the outage": producer.answers[("outage", "200")] > 0,
            "refused during the outage (503/50307)": producer.answers[("outage", "503/50307")] > 0,
            "no hang, no other error during the outage": not outage_other,
            "accepted again after the outage": producer.first_accept_after_s is not None,
            "table == acknowledged records (none lost, none twice, none refused)": table == producer.acked,
        }
        return {
            "rate_per_s": args.rate, "value_bytes": VALUE_BYTES, "partitions": PARTITIONS,
            "local_retention_bytes": args.local_retention_bytes, "outage_s": args.outage_seconds,
            "answers": answers, "acknowledged": len(producer.acked), "table_rows": len(table),
            "first_refusal_after_outage_start_s": producer.first_refusal_s,
            "first_accept_after_store_back_s": producer.first_accept_after_s,
            "table_caught_up_after_store_back_s": round(caught_up_s, 1),
            "checks": checks, "passed": all(checks.values()),
        }
    finally:
        try:
            if producer is not None and producer.is_alive():
                producer.stop()
        finally:
            broker.stop()
            proxy.stop()
            store.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.outage", description=__doc__.split("\n")[0])
    ap.add_argument("--outage-seconds", type=float, default=60.0)
    ap.add_argument("--before-seconds", type=float, default=10.0)
    ap.add_argument("--after-seconds", type=float, default=45.0,
                    help="steady produce after the store is back (the tierer's backoff reaches 30 s)")
    ap.add_argument("--rate", type=float, default=50.0, help="produce requests per second (one record each)")
    ap.add_argument("--local-retention-bytes", type=int, default=512 * 1024,
                    help="the topic's local.retention.bytes (small, so the outage reaches it)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="laketail-outage-") as workdir:
        summary = run(args, Path(workdir))
    print(json.dumps(summary, indent=2))
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
