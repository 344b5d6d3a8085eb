"""Kafka's ListOffsets over HTTP: ``GET /v1/topics/{t}/partitions/{p}/offsets``.

``?timestamp=`` is ``earliest`` (or Kafka's -2): the log start offset; ``latest`` (or
-1): the end a consumer can read to (the last stable offset for read_committed, the
high watermark for read_uncommitted); or milliseconds since the epoch: the earliest
offset whose timestamp is at or after it. The answer is ``{"offset", "timestamp"}``,
both -1 when no record qualifies (and timestamp -1 for earliest/latest), as Kafka
answers.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from laketail.api.deps import broker_of, json_response
from laketail.errors import InvalidRequest

router = APIRouter(tags=["v1 offsets"])


def parse_spec(raw: str) -> int | Literal["earliest", "latest"]:
    spec = raw.strip().lower()
    if spec in ("earliest", "-2"):
        return "earliest"
    if spec in ("latest", "-1"):
        return "latest"
    try:
        value = int(spec)
    except ValueError:
        raise InvalidRequest(f"timestamp must be earliest, latest or milliseconds, got {raw!r}") from None
    if value < 0:
        raise InvalidRequest(f"timestamp must be earliest, latest or milliseconds, got {raw!r}")
    return value


@router.get(
    "/v1/topics/{topic}/partitions/{partition}/offsets",
    summary="Offset for a timestamp, or the earliest / latest offset (Kafka's ListOffsets)",
)
async def list_offsets(
    request: Request,
    topic: str,
    partition: int,
    timestamp: str = Query("latest", description="earliest | latest | milliseconds since the epoch"),
    isolation_level: Literal["read_committed", "read_uncommitted"] = Query("read_committed"),
) -> Response:
    broker = broker_of(request)
    spec = parse_spec(timestamp)
    if spec == "earliest":
        state = await broker.partition_state_async(topic, partition)
        return json_response({"offset": state.log_start_offset, "timestamp": -1})
    if spec == "latest":
        state = await broker.partition_state_async(topic, partition)
        end = state.last_stable_offset if isolation_level == "read_committed" else state.high_watermark
        return json_response({"offset": end, "timestamp": -1})
    found = await broker.offset_for_timestamp(topic, partition, spec)
    if found is None:
        return json_response({"offset": -1, "timestamp": -1})
    offset, ts = found
    return json_response({"offset": offset, "timestamp": ts})
