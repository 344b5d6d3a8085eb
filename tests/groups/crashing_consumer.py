"""A consumer process for the delivery-guarantee tests: /v1 group protocol, one
partition, fixed-size batches, and a place to be killed.

``python crashing_consumer.py URL GROUP TOPIC MODE PROCESSED [--batch N]
[--crash-batch K --marker FILE] [--until OFFSET]``

It joins GROUP, starts at the group's committed offset of TOPIC's partition 0 (or at
0), and for every batch of records does two steps in MODE's order:

* ``at-most-once``: commit the batch, then process it;
* ``at-least-once``: process the batch, then commit it.

*Processing* appends each record's offset to PROCESSED, one per line, fsynced.
With ``--crash-batch K`` it stops between the two steps of batch K (counted from
0): it creates MARKER and waits there to be killed (SIGKILL). Without it, it runs
until it has processed up to ``--until`` (exclusive), then leaves the group.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial

import httpx


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("mode", choices=["at-most-once", "at-least-once"])
    parser.add_argument("processed")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--crash-batch", type=int)
    parser.add_argument("--marker")
    parser.add_argument("--until", type=int)
    args = parser.parse_args(argv)

    http = httpx.Client(base_url=args.url, timeout=120.0)
    groups = f"/v1/groups/{args.group}"
    member = {"member_id": "", "generation_id": -1}

    def join() -> None:
        resp = http.post(groups + "/join", json={
            "member_id": member["member_id"], "client_id": f"crashing-{os.getpid()}",
            "topics": [args.topic], "strategies": ["range"], "session_timeout_ms": 3000,
            "rebalance_timeout_ms": 60_000,
        })
        resp.raise_for_status()
        member.update(member_id=resp.json()["member_id"], generation_id=resp.json()["generation_id"])
        sync = http.post(groups + "/sync", json=member)
        sync.raise_for_status()
        assert {"topic": args.topic, "partition": 0} in sync.json()["assignment"], sync.text

    join()
    committed = http.post(groups + "/committed", json={"partitions": [{"topic": args.topic, "partition": 0}]})
    committed.raise_for_status()
    position = max(committed.json()["offsets"][0]["offset"], 0)

    def commit(next_offset: int) -> None:
        resp = http.post(groups + "/commit", json={
            **member, "offsets": [{"topic": args.topic, "partition": 0, "offset": next_offset}],
        })
        resp.raise_for_status()

    def process(offsets: list[int]) -> None:
        with open(args.processed, "a") as out:
            out.write("".join(f"{o}\n" for o in offsets))
            out.flush()
            os.fsync(out.fileno())

    def between() -> None:
        with open(args.marker, "w") as out:
            out.write("between the two steps\n")
        while True:  # wait here for SIGKILL
            time.sleep(60)

    batch_index = 0
    while args.until is None or position < args.until:
        if http.post(groups + "/heartbeat", json=member).status_code == 409:
            join()
        resp = http.get(
            f"/topics/{args.topic}/partitions/0/records",
            params={"offset": position, "max_records": args.batch, "timeout": 500},
            headers={"Accept": "application/vnd.kafka.binary.v2+json"},
        )
        resp.raise_for_status()
        offsets = [r["offset"] for r in resp.json()]
        if not offsets:
            continue
        next_offset = offsets[-1] + 1
        first, second = (
            (partial(commit, next_offset), partial(process, offsets)) if args.mode == "at-most-once"
            else (partial(process, offsets), partial(commit, next_offset))
        )
        first()
        if batch_index == args.crash_batch:
            between()
        second()
        position = next_offset
        batch_index += 1
    http.post(groups + "/leave", json={"member_id": member["member_id"]})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
