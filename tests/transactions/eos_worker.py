"""A consume-transform-produce worker for the exactly-once test, in plain httpx
against the REST contract, and a process to be killed with SIGKILL at any moment.

``python eos_worker.py URL INPUT OUTPUT GROUP TRANSACTIONAL_ID PARTITIONS [--batch N]``

It starts a session for TRANSACTIONAL_ID (``POST /v1/producers``: the epoch bump
fences the previous incarnation and aborts its open transaction), then reads GROUP's
committed offsets of INPUT's partitions (after the init, so a commit the previous
incarnation sent is already complete), and loops: fetch up to N records per input
partition (read_committed); begin; produce each value, transformed to
``b"out:" + value``, transactionally to the same partition of OUTPUT; send the next
offsets to the transaction; commit. It exits 0 once the committed offsets reach
INPUT's end offsets (read at start: the input is complete before the worker runs).

Every step's answer must be 200: anything else (a fencing error included) ends the
process with the answer on stderr and a non-zero code.
"""

from __future__ import annotations

import argparse
import base64
import sys

import httpx

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("group")
    parser.add_argument("transactional_id")
    parser.add_argument("partitions", type=int)
    parser.add_argument("--batch", type=int, default=5)
    args = parser.parse_args(argv)
    http = httpx.Client(base_url=args.url, timeout=120.0)
    partitions = list(range(args.partitions))

    def ok(resp: httpx.Response) -> dict | list:
        if resp.status_code != 200:
            print(f"{resp.request.method} {resp.request.url}: {resp.status_code} {resp.text}", file=sys.stderr)
            raise SystemExit(2)
        return resp.json()

    session = ok(http.post("/v1/producers", json={"transactional_id": args.transactional_id,
                                                  "transaction_timeout_ms": 60_000}))
    ident = {"producer_id": session["producer_id"], "producer_epoch": session["producer_epoch"]}
    txn = f"/v1/transactions/{args.transactional_id}"
    sequences = {p: 0 for p in partitions}  # per output partition, from 0 in each new epoch

    committed = ok(http.post(f"/v1/groups/{args.group}/committed", json={
        "partitions": [{"topic": args.input, "partition": p} for p in partitions],
    }))
    position = {o["partition"]: max(o["offset"], 0) for o in committed["offsets"]}
    end = {
        p: ok(http.get(f"/topics/{args.input}/partitions/{p}/offsets"))["end_offset"] for p in partitions
    }
    print(f"epoch {ident['producer_epoch']} starts at {position}", flush=True)

    while any(position[p] < end[p] for p in partitions):
        batches: dict[int, list[dict]] = {}
        for p in partitions:
            if position[p] < end[p]:
                batches[p] = ok(http.get(
                    f"/topics/{args.input}/partitions/{p}/records",
                    params={"offset": position[p], "max_records": args.batch,
                            "isolation_level": "read_committed"},
                    headers={"Accept": BINARY_V2},
                ))
        ok(http.post(txn + "/begin", json=ident))
        for p, records in batches.items():
            if not records:
                continue
            values = [base64.b64encode(b"out:" + base64.b64decode(r["value"])).decode() for r in records]
            ok(http.post(
                f"/topics/{args.output}/partitions/{p}",
                params={**ident, "sequence": sequences[p], "transactional": "true"},
                json={"records": [{"value": v} for v in values]},
                headers={"Content-Type": BINARY_V2, "Accept": V2},
            ))
            sequences[p] += len(records)
        advanced = {p: records[-1]["offset"] + 1 for p, records in batches.items() if records}
        ok(http.post(txn + "/offsets", json={**ident, "group_id": args.group, "offsets": [
            {"topic": args.input, "partition": p, "offset": o} for p, o in advanced.items()
        ]}))
        ok(http.post(txn + "/commit", json=ident))
        position.update(advanced)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
