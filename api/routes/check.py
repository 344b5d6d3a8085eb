"""A topic's health: ``GET /v1/topics/{t}/check`` and ``GET /v1/topics/{t}/damage``.

``check`` reads the topic's whole table and this broker's hot logs of it and answers
``{"topic", "ok", "partitions": [{"partition", "files", "table_records", "hot_records",
"tiered_offset", "problems": [...], "notes": [...]}]}`` (``laketail check TOPIC``);
``ok`` is false when any partition has a problem. ``damage`` answers the damaged offset
ranges the broker found when it last validated the table, ``{"<partition>":
[{"first_offset", "last_offset", "reason"}]}``, cheaply.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from laketail.api.deps import broker_of, json_response

router = APIRouter(tags=["v1 check"])


@router.get("/v1/topics/{topic}/check", summary="Verify the topic's table and hot logs (slow: reads them all)")
async def check_topic(request: Request, topic: str) -> Response:
    return json_response(await broker_of(request).check_topic(topic))


@router.get("/v1/topics/{topic}/damage", summary="Damaged offset ranges of the topic's table, per partition")
async def table_damage(request: Request, topic: str) -> Response:
    damage = await broker_of(request).table_damage(topic)
    return json_response({str(p): ranges for p, ranges in damage.items()})
