"""laketail's ``/v1`` producer sessions, transactions and batch transactions.

What REST proxies never offered: Kafka's idempotent and transactional producer over
HTTP. The semantics are the transaction coordinator's
(:mod:`laketail.coordinator.transactions`); these routes only parse and answer.

* ``POST /v1/producers`` ``{transactional_id (null: idempotent only),
  transaction_timeout_ms}`` -> ``{producer_id, producer_epoch}``. For a transactional
  id this is Kafka's InitProducerId: the epoch is bumped, the previous session is
  fenced and its open transaction aborted.
* Records then go to the per-partition produce endpoints with ``producer_id``,
  ``producer_epoch``, ``sequence`` and ``transactional`` query parameters (see
  :func:`laketail.api.deps.producer_of`).
* ``POST /v1/transactions/{id}/begin | partitions | offsets | commit | abort`` and
  ``GET /v1/transactions/{id}``: the transaction's life. ``offsets`` are Kafka's
  committed offsets (the next offset to read), committed to the group only if the
  transaction commits.
* ``POST /v1/sinks/{sink}/batches/{batch}/enlist | commit | abort`` and
  ``GET /v1/sinks/{sink}``: batch transactions for Spark's exactly-once sink.

Transactional and sink ids may contain ``/`` (Kafka allows any character); send them
percent-encoded. Every failure is a laketail error: PRODUCER_FENCED 409/40915,
INVALID_PRODUCER_EPOCH 409/40911, INVALID_PRODUCER_ID_MAPPING 409/40913,
CONCURRENT_TRANSACTIONS 409/40914 (retriable), INVALID_TXN_STATE 409/40912,
TRANSACTIONAL_ID_NOT_FOUND 404/40407.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from laketail.api import authz
from laketail.api.deps import json_response
from laketail.api.services import transactions_of
from laketail.bounds import INT16_MAX, INT32_MAX, INT64_MAX
from laketail.coordinator.offsets import CommittedOffset
from laketail.errors import InvalidProducerIdMapping
from laketail.security.acl import AclOperation as Op
from laketail.security.acl import ResourceType as R

router = APIRouter(tags=["v1 transactions"])

#: A sink's batch id: Spark's batchId, a non-negative long.
BatchId = Annotated[int, Path(ge=0, le=INT64_MAX, description="Spark's batch id (int64)")]

_FENCING = {
    "description": "PRODUCER_FENCED (40915) for an epoch a newer session replaced, "
    "INVALID_PRODUCER_ID_MAPPING (40913), CONCURRENT_TRANSACTIONS (40914, retry), "
    "INVALID_TXN_STATE (40912)",
}
_UNKNOWN_ID = {"description": "TRANSACTIONAL_ID_NOT_FOUND (40407): init the producer first"}
_ERRORS: dict[int | str, dict[str, Any]] = {404: _UNKNOWN_ID, 409: _FENCING}


# -- bodies ---------------------------------------------------------------------------------


class InitProducerRequest(BaseModel):
    transactional_id: str | None = Field(
        default=None, description="null (or absent): an idempotent producer without transactions"
    )
    transaction_timeout_ms: int = Field(
        default=60_000, description="transactions open longer are aborted (transaction.timeout.ms)"
    )
    producer_id: int | None = Field(
        default=None, ge=-1, le=INT64_MAX,
        description="with producer_epoch: the session asking for a bump after an abort (KIP-360)",
    )
    producer_epoch: int | None = Field(default=None, ge=-1, le=INT16_MAX, description="the epoch that session holds")


class ProducerSession(BaseModel):
    producer_id: int = Field(ge=0, le=INT64_MAX)
    producer_epoch: int = Field(ge=0, le=32767)


class TopicPartitionModel(BaseModel):
    topic: str
    partition: int = Field(ge=0, le=INT32_MAX)


class AddPartitionsRequest(ProducerSession):
    partitions: list[TopicPartitionModel]


class TxnOffset(BaseModel):
    topic: str
    partition: int = Field(ge=0, le=INT32_MAX)
    offset: int = Field(ge=0, le=INT64_MAX, description="the next offset to read (Kafka's convention)")
    metadata: str | None = None


class AddOffsetsRequest(ProducerSession):
    group_id: str = Field(min_length=1)
    generation_id: int = Field(-1, description="-1: do not check the member's generation")
    member_id: str = ""
    offsets: list[TxnOffset]


class EnlistRequest(BaseModel):
    transaction_timeout_ms: int = 60_000


class CommitBatchRequest(BaseModel):
    transactional_ids: list[str]


# -- producers and transactions ---------------------------------------------------------------


@router.post(
    "/v1/producers",
    summary="A producer id and epoch (Kafka's InitProducerId); fences the previous session of a transactional id",
    responses={200: {"content": {"application/json": {"example": {"producer_id": 7, "producer_epoch": 0}}}}},
)
async def init_producer(request: Request, body: InitProducerRequest | None = None) -> Response:
    body = body or InitProducerRequest()
    if body.transactional_id:  # InitProducerId: Write on the transactional id, else IdempotentWrite
        authz.check(request, Op.WRITE, R.TRANSACTIONAL_ID, body.transactional_id)
    else:
        authz.check(request, Op.IDEMPOTENT_WRITE, R.CLUSTER)
    expected = None
    if body.producer_id is not None and body.producer_epoch is not None:
        expected = (body.producer_id, body.producer_epoch)
    producer_id, epoch = await transactions_of(request).init_producer_id(
        body.transactional_id or None, body.transaction_timeout_ms, expected
    )
    return json_response({"producer_id": producer_id, "producer_epoch": epoch})


@router.post(
    "/v1/transactions/{transactional_id:path}/begin",
    summary="Begin a transaction: checks the session (the transaction opens with its first partition or offsets)",
    responses=_ERRORS,
)
async def begin(request: Request, transactional_id: str, body: ProducerSession) -> Response:
    txns = transactions_of(request)
    meta = txns.describe(transactional_id)  # TRANSACTIONAL_ID_NOT_FOUND
    if meta.producer_id != body.producer_id:
        raise InvalidProducerIdMapping(
            f"producer id {body.producer_id} is not the one of '{transactional_id}'"
        )
    txns.check_idempotent_produce(body.producer_id, body.producer_epoch)  # fenced? completing?
    return json_response({})


@router.post(
    "/v1/transactions/{transactional_id:path}/partitions",
    summary="Add partitions to the transaction (a transactional produce also adds its own)",
    responses=_ERRORS,
)
async def add_partitions(request: Request, transactional_id: str, body: AddPartitionsRequest) -> Response:
    for t in {tp.topic for tp in body.partitions}:
        authz.check(request, Op.WRITE, R.TOPIC, t)  # AddPartitionsToTxn: Write on each topic
    await transactions_of(request).add_partitions(
        transactional_id, body.producer_id, body.producer_epoch,
        [(tp.topic, tp.partition) for tp in body.partitions],
    )
    return json_response({})


@router.post(
    "/v1/transactions/{transactional_id:path}/offsets",
    summary="Send a group's consumed offsets to the transaction (committed only if it commits)",
    responses=_ERRORS,
)
async def add_offsets(request: Request, transactional_id: str, body: AddOffsetsRequest) -> Response:
    authz.check(request, Op.READ, R.GROUP, body.group_id)  # TxnOffsetCommit: Read on the group and topics
    for t in {o.topic for o in body.offsets}:
        authz.check(request, Op.READ, R.TOPIC, t)
    offsets = {(o.topic, o.partition): CommittedOffset(o.offset, o.metadata or "") for o in body.offsets}
    await transactions_of(request).add_offsets(
        transactional_id, body.producer_id, body.producer_epoch, body.group_id, offsets,
        generation_id=body.generation_id, member_id=body.member_id,
    )
    return json_response({})


_END_EXAMPLE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/json": {"example": {"state": "CompleteCommit"}}}}, **_ERRORS,
}


@router.post(
    "/v1/transactions/{transactional_id:path}/commit",
    summary="Commit: PrepareCommit, COMMIT markers in every partition, the offsets, CompleteCommit",
    responses=_END_EXAMPLE,
)
async def commit(request: Request, transactional_id: str, body: ProducerSession) -> Response:
    state = await transactions_of(request).end(
        transactional_id, body.producer_id, body.producer_epoch, commit=True
    )
    return json_response({"state": state})


@router.post(
    "/v1/transactions/{transactional_id:path}/abort",
    summary="Abort: PrepareAbort, ABORT markers in every partition, CompleteAbort",
    responses=_END_EXAMPLE,
)
async def abort(request: Request, transactional_id: str, body: ProducerSession) -> Response:
    state = await transactions_of(request).end(
        transactional_id, body.producer_id, body.producer_epoch, commit=False
    )
    return json_response({"state": state})


@router.get(
    "/v1/transactions/{transactional_id:path}",
    summary="Describe a transactional id: its producer, epoch, state and open partitions",
    responses={404: _UNKNOWN_ID},
)
async def describe(request: Request, transactional_id: str) -> Response:
    meta = transactions_of(request).describe(transactional_id)
    return json_response({
        "transactional_id": meta.transactional_id,
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "state": meta.state,
        "partitions": [{"topic": t, "partition": p} for t, p in sorted(meta.partitions)],
        "timeout_ms": meta.timeout_ms,
    })


# -- batch transactions (Spark's sink) -------------------------------------------------------------


@router.post(
    "/v1/sinks/{sink_id:path}/batches/{batch_id}/enlist",
    summary="A fresh transactional session for one writer attempt of a batch",
)
async def enlist(request: Request, sink_id: str, batch_id: BatchId, body: EnlistRequest | None = None) -> Response:
    timeout_ms = body.transaction_timeout_ms if body is not None else 60_000
    transactional_id, producer_id, epoch = await transactions_of(request).enlist(
        sink_id, batch_id, timeout_ms
    )
    return json_response({
        "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": epoch,
    })


@router.post(
    "/v1/sinks/{sink_id:path}/batches/{batch_id}/commit",
    summary="Commit exactly these sessions as the batch (others of the batch abort); "
    "committed=false when the batch id was committed before; INVALID_TXN_STATE when nobody enlisted in it",
    responses={200: {"content": {"application/json": {"example": {"committed": True}}}}, 409: _FENCING},
)
async def commit_batch(request: Request, sink_id: str, batch_id: BatchId, body: CommitBatchRequest) -> Response:
    committed = await transactions_of(request).commit_batch(sink_id, batch_id, body.transactional_ids)
    return json_response({"committed": committed})


@router.post(
    "/v1/sinks/{sink_id:path}/batches/{batch_id}/abort",
    summary="Abort every session enlisted in the batch",
)
async def abort_batch(request: Request, sink_id: str, batch_id: BatchId) -> Response:
    await transactions_of(request).abort_batch(sink_id, batch_id)
    return json_response({})


@router.get("/v1/sinks/{sink_id:path}", summary="A sink's last committed batch id (-1: none)")
async def describe_sink(request: Request, sink_id: str) -> Response:
    sink = transactions_of(request).sink(sink_id)
    return json_response({"sink_id": sink.sink_id, "committed_batch": sink.committed_batch})
