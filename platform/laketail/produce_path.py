"""The produce path: validate a produce request, partition it, append it on the leader.

Role: :meth:`ProducePath.produce` turns a request (one Arrow batch in
:data:`PRODUCE_SCHEMA`) into one frame batch per partition and appends each on the
partition's leader: here (through the replica manager's leader state, then waiting for
``acks``), or forwarded over the internal API to the broker that leads. Nothing is
written unless every record passes validation (sizes, partitions, timestamps,
idempotent/transactional producer state).

Parts (passed in by the broker, the composition root): settings and clock, the cluster
node (leadership, ISR, forwarding), the tierer (woken when a partition has
``table.flush.bytes`` waiting), the transaction coordinator (checks of transactional
and idempotent producers), two lookups of the broker's topics, and the schema
registry's checks of topics that validate schemas (:mod:`laketail.schemas.validation`).

Hot path (``api/hot_routes.py``): one frame per request in the common case, no thread
hop before the append; keep it that way. Thread-safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

import pyarrow as pa
import pyarrow.compute as pc

from laketail.bounds import check_timestamp_column
from laketail.bounds import timestamp_ms as checked_timestamp_ms
from laketail.catalog import INTERNAL_TOPICS, TopicInfo, check_not_internal
from laketail.cluster.node import INTERNAL
from laketail.config import BrokerSettings, TopicConfig
from laketail.errors import InvalidRequest, LaketailError, LeaderNotAvailable, RecordTooLarge, UnknownTopicOrPartition
from laketail.handoff import FAILED, REFUSED, Append, HandoffClient, SiblingUnreachable
from laketail.partitioner import StickyPartitioner, partition_for_key
from laketail.records import (
    CREATE_TIME,
    HEADER_TYPE,
    LOG_APPEND_TIME,
    TIMESTAMP_TYPE,
    Acks,
    build_frame_batch,
    null_headers,
)
from laketail.storage.object_store import is_remote
from laketail.storage.partition_log import ProducerBatch, local_retention_bytes

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from laketail.clock import Clock
    from laketail.cluster.node import ClusterNode
    from laketail.coordinator.transactions import TransactionCoordinator
    from laketail.schemas.validation import SchemaValidation
    from laketail.storage.tierer import Tierer

#: What one record costs against ``max.message.bytes`` besides its key, value and
#: headers: Kafka's producer sizes a record as the batch it would travel in alone
#: (``AbstractRecords.estimateSizeInBytesUpperBound``: ``RECORD_BATCH_OVERHEAD`` 61 +
#: ``DefaultRecord.MAX_RECORD_OVERHEAD`` 21).
RECORD_SIZE_OVERHEAD = 61 + 21

#: Columns a produce request may carry, all optional but ``value``. ``timestamp`` is
#: Kafka's milliseconds (null: now); ``partition`` null means "let the partitioner pick".
PRODUCE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
        pa.field("timestamp", pa.int64()),
        pa.field("partition", pa.int32()),
    ]
)


#: Kafka errors a leader answers before it appends anything: a produce refused with one
#: of them wrote nothing. Any other failure (REQUEST_TIMED_OUT from a forward nobody
#: answered, NOT_LEADER_OR_FOLLOWER after the append, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
#: leaves it unknown whether the records are in the log.
NOTHING_WRITTEN = frozenset({
    "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS", "FENCED_LEADER_EPOCH",
    "INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED", "OUT_OF_ORDER_SEQUENCE_NUMBER", "INVALID_PRODUCER_ID_MAPPING",
    "INVALID_TXN_STATE", "INVALID_RECORD", "RECORD_TOO_LARGE", "INVALID_REQUEST", "CONCURRENT_TRANSACTIONS",
    "INVALID_TOPIC_EXCEPTION", "TOPIC_AUTHORIZATION_FAILED",
})


def whole_request_failure(failures: list[LaketailError], appends: int,
                          per_record_errors: bool) -> LaketailError | None:
    """The error that answers a multi-partition produce as a whole, given its failed
    appends (of ``appends``); None when it is answered per record. As a whole only when
    nothing was written (every append failed with an error of :data:`NOTHING_WRITTEN`)
    or the caller cannot say per record what was; an unknown outcome then wins over an
    error that says nothing was written, which would be a lie for some records."""
    if not failures:
        return None
    unknown = [f for f in failures if f.kafka_name not in NOTHING_WRITTEN]
    if not per_record_errors or (len(failures) == appends and not unknown):
        return (unknown or failures)[0]
    return None


class ProduceResult:
    """Where each record of a produce request went, in request order.

    ``partitions``, ``offsets`` and ``timestamps_ms`` are lists with one entry per
    record. In the common case -- every record to one partition, one timestamp for all
    -- they are built only when asked for: the v2 answer encodes that case from
    ``dense`` without a Python object per record.
    """

    __slots__ = ("count", "dense", "errors", "_partitions", "_offsets", "_timestamps_ms")

    def __init__(
        self,
        partitions: list[int] | int,
        offsets: list[int] | int,
        timestamps_ms: list[int] | int,
        count: int,
        errors: "list[LaketailError | None] | None" = None,
    ) -> None:
        #: records in the request
        self.count = count
        #: ``(partition, base offset)`` when every record went to one partition, in order
        self.dense: tuple[int, int] | None = (
            (partitions, offsets) if isinstance(partitions, int) and isinstance(offsets, int) else None
        )
        #: per record, why it was not written (``None``: written); ``None`` when all were.
        #: A record with an error has offset -1 and, if it was never placed, partition -1.
        self.errors = errors
        self._partitions = partitions
        self._offsets = offsets
        self._timestamps_ms = timestamps_ms

    @property
    def partitions(self) -> list[int]:
        if isinstance(self._partitions, int):
            self._partitions = [self._partitions] * self.count
        return self._partitions

    @property
    def offsets(self) -> list[int]:
        if isinstance(self._offsets, int):
            self._offsets = list(range(self._offsets, self._offsets + self.count))
        return self._offsets

    def first_error(self) -> "LaketailError | None":
        return next((e for e in self.errors if e is not None), None) if self.errors else None

    def merged(self, kept: list[int], refused: "dict[int, LaketailError]", count: int,
               now_ms: int) -> "ProduceResult":
        """This result (of the records at request indices ``kept``) with the ``refused``
        records put back in request order, for a request of ``count`` records."""
        partitions, offsets, stamps = [-1] * count, [-1] * count, [now_ms] * count
        errors: list[LaketailError | None] = [None] * count
        for j, i in enumerate(kept):
            partitions[i], offsets[i], stamps[i] = self.partitions[j], self.offsets[j], self.timestamps_ms[j]
            errors[i] = self.errors[j] if self.errors else None
        for i, error in refused.items():
            errors[i] = error
        return ProduceResult(partitions, offsets, stamps, count, errors)

    @property
    def timestamps_ms(self) -> list[int]:
        if isinstance(self._timestamps_ms, int):
            self._timestamps_ms = [self._timestamps_ms] * self.count
        return self._timestamps_ms


@dataclass(frozen=True)
class _ProducePlan:
    """A validated produce request: one frame per partition, ready to append."""

    topic: str
    count: int
    partitions: list[int] | int  # an int: every record to that partition
    timestamps_ms: list[int] | int  # an int: one timestamp for every record
    appends: list[tuple]  # (partition, frame batch, request rows or None, max timestamp us)
    producer: ProducerBatch | None = None


@dataclass
class TopicRuntime:
    """A topic as this broker runs it: its description, effective config and sticky
    partitioner (updated in place when its configs change, replaced when the topic is made anew)."""

    info: TopicInfo
    config: TopicConfig
    sticky: StickyPartitioner = field(default_factory=StickyPartitioner)


class ProducePath:
    """Produce and append for one broker (see the module docstring)."""

    def __init__(
        self,
        settings: BrokerSettings,
        clock: "Clock",
        cluster: "ClusterNode",
        tierer: "Tierer",
        transactions: "TransactionCoordinator",
        runtime: Callable[[str], TopicRuntime],
        check_partition: Callable[[str, int], TopicInfo],
        schema_validation: "SchemaValidation | None" = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.cluster = cluster
        self.tierer = tierer
        self.transactions = transactions
        #: the topic as this broker runs it; UNKNOWN_TOPIC_OR_PARTITION when unknown
        self._runtime = runtime
        #: the topic of an existing partition; UNKNOWN_TOPIC_OR_PARTITION otherwise
        self.check_partition = check_partition
        #: the registry's checks of topics with confluent.*.schema.validation
        self.schema_validation = schema_validation
        #: request-process mode: appends to partitions a sibling process leads go to it
        #: over the local hand-off (:mod:`laketail.handoff`); None otherwise
        self.handoff: HandoffClient | None = None
        #: appends forwarded over the inter-broker listener (metrics)
        self.http_forwards = 0
        #: on an object-store root the hot log buffers what the store has not taken yet,
        #: up to ``local.retention.bytes`` per partition (:meth:`append`)
        self.bounded_hot_tier = is_remote(settings.data)

    def _validates(self, topic: str) -> tuple[bool, bool]:
        config = self._runtime(topic).config
        return config.confluent_value_schema_validation, config.confluent_key_schema_validation

    async def _check_schemas(self, topic: str, batch: pa.RecordBatch | pa.Table) -> None:
        """INVALID_RECORD when a validating topic gets a key or value its subject does
        not take (:mod:`laketail.schemas.validation`); before anything is planned."""
        values, keys = self._validates(topic)
        if not (values or keys):
            return
        if self.schema_validation is None:
            raise InvalidRequest(f"topic '{topic}' validates schemas and this broker has no schema registry")
        await self.schema_validation.check(topic, batch, values, keys)

    async def produce(
        self,
        topic: str,
        batch: pa.RecordBatch | pa.Table,
        acks: Acks = "all",
        producer: ProducerBatch | None = None,
        *,
        internal_topics_allowed: bool = False,
        per_record_errors: bool = False,
    ) -> ProduceResult:
        """Validate, partition, append; return each record's partition and offset.

        ``batch`` has ``PRODUCE_SCHEMA``'s columns (any but ``value`` may be missing).
        Nothing is written unless every record passes validation. With ``producer`` (an
        idempotent or transactional batch) every record must go to one partition; a
        retried batch gets its original offsets back. Only the coordinators append to
        the internal topics (``internal_topics_allowed``, Kafka's flag of the same name);
        a client gets INVALID_TOPIC_EXCEPTION.

        ``per_record_errors`` (the REST answers, which say per record what was written,
        as Confluent's v2 ``offsets[i]`` and v3 reports do): a record over
        ``max.message.bytes`` is refused alone and the others are written, and when the
        appends to some partitions fail and others succeed the result says which records
        failed (``errors``) instead of raising. A request of which nothing was written
        still raises, as does any failure without the flag.
        """
        if not internal_topics_allowed:
            check_not_internal(topic, "append to")
            await self._check_schemas(topic, batch)
        if producer is not None and producer.producer_id >= 0:
            if producer.transactional:
                partition = self._single_partition(topic, batch)
                await self.transactions.check_transactional_produce(
                    producer.producer_id, producer.producer_epoch, topic, partition
                )
            else:
                self.transactions.check_idempotent_produce(producer.producer_id, producer.producer_epoch)
        if not per_record_errors or producer is not None:
            return await self._execute(self._plan_produce(topic, batch, producer), acks)
        count = batch.num_rows
        batch, refused = self._refuse_oversized(topic, batch)
        if not refused:
            return await self._execute(self._plan_produce(topic, batch), acks, per_record_errors=True)
        if len(refused) == count:
            raise next(iter(refused.values()))
        result = await self._execute(self._plan_produce(topic, batch), acks, per_record_errors=True)
        kept = [i for i in range(count) if i not in refused]
        return result.merged(kept, refused, count, self.clock.now_ms())

    async def produce_batch(
        self,
        topic: str,
        partition: int,
        keys: pa.Array,
        values: pa.Array,
        headers: pa.Array,
        timestamps_ms: list[int],
        acks: Acks = "all",
        producer: ProducerBatch | None = None,
    ) -> int:
        """One producer batch to one named partition, as Kafka's Produce carries it:
        the checks of :meth:`produce` (internal topics, the producer's state, every
        record against ``max.message.bytes``, the subject's schemas on a topic with
        ``confluent.*.schema.validation``, timestamps, ``message.timestamp.type``)
        without its partitioning and column work, which cost more than the append for
        the one- or two-record batches a client sends at a low rate. Returns the base
        offset once ``acks`` is satisfied; nothing is written unless every check passes."""
        check_not_internal(topic, "append to")
        self.check_partition(topic, partition)
        if producer is not None and producer.producer_id >= 0:
            if producer.transactional:
                await self.transactions.check_transactional_produce(
                    producer.producer_id, producer.producer_epoch, topic, partition
                )
            else:
                self.transactions.check_idempotent_produce(producer.producer_id, producer.producer_epoch)
        if not timestamps_ms:
            raise InvalidRequest("a produce request needs at least one record")
        config = self._runtime(topic).config
        self._check_sizes(keys, values, headers, config.max_message_bytes)
        if config.confluent_value_schema_validation or config.confluent_key_schema_validation:
            await self._check_schemas(topic, pa.table({"key": keys, "value": values}))
        if config.message_timestamp_type == "LogAppendTime":
            ts_type = LOG_APPEND_TIME
            max_ts_us = self.clock.now_ms() * 1000
            timestamps_us = pa.repeat(pa.scalar(max_ts_us, TIMESTAMP_TYPE), len(timestamps_ms))
        else:
            ts_type = CREATE_TIME
            checked_timestamp_ms(min(timestamps_ms))  # stored as microseconds: refused, never wrapped
            max_ts_us = checked_timestamp_ms(max(timestamps_ms)) * 1000  # the log need not find it again
            timestamps_us = pa.array([t * 1000 for t in timestamps_ms], TIMESTAMP_TYPE)
        if producer is None:
            frame = build_frame_batch(timestamps_us=timestamps_us, keys=keys, values=values, headers=headers,
                                      timestamp_type=ts_type)
        else:
            frame = build_frame_batch(
                timestamps_us=timestamps_us, keys=keys, values=values, headers=headers, timestamp_type=ts_type,
                producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                base_sequence=producer.base_sequence, transactional=producer.transactional,
            )
        return await self.append(topic, partition, frame, acks, max_ts_us, producer)

    def _refuse_oversized(self, topic: str, batch: pa.RecordBatch | pa.Table
                          ) -> tuple[pa.RecordBatch | pa.Table, dict[int, LaketailError]]:
        """The records that fit ``max.message.bytes``, and a MESSAGE_TOO_LARGE for each
        of the others by request index."""
        limit = self._runtime(topic).config.max_message_bytes
        if batch.get_total_buffer_size() + RECORD_SIZE_OVERHEAD <= limit:
            return batch, {}  # the whole request fits: no record can be too large
        names = batch.schema.names
        n = batch.num_rows
        keys = batch.column("key") if "key" in names else pa.nulls(n, pa.binary())
        headers = batch.column("headers") if "headers" in names else null_headers(n)
        values = batch.column("value") if "value" in names else pa.nulls(n, pa.binary())
        keys, values, headers = (c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
                                 for c in (keys, values, headers))
        sizes = self._record_sizes(keys, values, headers, limit)
        if sizes is None:
            return batch, {}
        too_large = pc.greater(sizes, limit)
        refused: dict[int, LaketailError] = {
            i: RecordTooLarge(f"record {i} is {size} bytes with its batch overhead, above "
                              f"max.message.bytes={limit}")
            for i, size in enumerate(sizes.to_pylist()) if size > limit
        }
        return batch.filter(pc.invert(too_large)), refused

    def _single_partition(self, topic: str, batch: pa.RecordBatch | pa.Table) -> int:
        """The one partition a producer batch goes to (it must name it)."""
        if "partition" not in batch.schema.names or batch.num_rows == 0:
            raise InvalidRequest("a transactional batch must name its partition")
        bounds = pc.min_max(batch.column("partition"))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is None or low != high:
            raise InvalidRequest("a transactional batch goes to exactly one partition")
        self.check_partition(topic, low)
        return low

    def produce_nowait(self, topic: str, batch: pa.RecordBatch | pa.Table) -> "asyncio.Task[ProduceResult]":
        """acks=0: validate now (raising what ``produce`` would), append in the background.

        The caller keeps the returned task referenced until it ends."""
        check_not_internal(topic, "append to")  # only clients produce with acks=0
        values, keys = self._validates(topic)
        if values or keys:
            if self.schema_validation is None:
                raise InvalidRequest(f"topic '{topic}' validates schemas and this broker has no schema registry")
            if not self.schema_validation.check_here(topic, batch, values, keys):
                # the follower's copy may need loading: checked in the task, a refused request dropped
                return asyncio.get_running_loop().create_task(self._checked_nowait(topic, batch))
        plan = self._plan_produce(topic, batch)
        return asyncio.get_running_loop().create_task(self._execute(plan, "0"))

    async def _checked_nowait(self, topic: str, batch: pa.RecordBatch | pa.Table) -> ProduceResult:
        await self._check_schemas(topic, batch)
        return await self._execute(self._plan_produce(topic, batch), "0")

    def _plan_produce(
        self, topic: str, batch: pa.RecordBatch | pa.Table, producer: ProducerBatch | None = None
    ) -> _ProducePlan:
        """Everything but the appends: validation, partitioning, frames (no awaits)."""
        runtime = self._runtime(topic)
        config = runtime.config
        if isinstance(batch, pa.Table):
            batch = (
                batch.combine_chunks().to_batches()[0] if batch.num_rows
                else pa.RecordBatch.from_pylist([], PRODUCE_SCHEMA)
            )
        n = batch.num_rows
        if n == 0:
            raise InvalidRequest("a produce request needs at least one record")
        names = batch.schema.names
        values = batch.column("value") if "value" in names else pa.nulls(n, pa.binary())
        keys = batch.column("key") if "key" in names else pa.nulls(n, pa.binary())
        headers = batch.column("headers") if "headers" in names else null_headers(n)

        self._check_sizes(keys, values, headers, config.max_message_bytes)
        partitions = self._assign_partitions(runtime, keys, batch.column("partition") if "partition" in names else None)

        now_ms = self.clock.now_ms()
        if config.message_timestamp_type == "LogAppendTime" or "timestamp" not in names:
            ts_type = LOG_APPEND_TIME if config.message_timestamp_type == "LogAppendTime" else CREATE_TIME
            ts_us = pa.repeat(pa.scalar(now_ms * 1000, TIMESTAMP_TYPE), n)
            timestamps_ms: list[int] | int = now_ms
            max_ts_us = now_ms * 1000
        else:
            ts_type = CREATE_TIME
            ts_ms = pc.fill_null(batch.column("timestamp").cast(pa.int64()), now_ms)
            check_timestamp_column(ts_ms)  # stored as microseconds: refused, never wrapped
            ts_us = pc.multiply(ts_ms, 1000).cast(TIMESTAMP_TYPE)
            timestamps_ms = ts_ms.to_pylist()
            max_ts_us = None

        if isinstance(partitions, int):  # the common case: the whole request to one partition
            if producer is None:
                frame = build_frame_batch(
                    timestamps_us=ts_us, keys=keys, values=values, headers=headers, timestamp_type=ts_type
                )
            else:
                frame = build_frame_batch(
                    timestamps_us=ts_us, keys=keys, values=values, headers=headers, timestamp_type=ts_type,
                    producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                    base_sequence=producer.base_sequence, transactional=producer.transactional,
                )
            appends: list[tuple] = [(partitions, frame, None, max_ts_us)]
            return _ProducePlan(topic, n, partitions, timestamps_ms, appends, producer)
        if producer is not None:
            raise InvalidRequest(
                "an idempotent or transactional batch goes to one partition: name it, or use one key"
            )

        part_list = partitions.to_pylist()
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(part_list):
            groups.setdefault(p, []).append(i)
        appends = []
        for p, rows in groups.items():
            idx = pa.array(rows, pa.int32())
            frame = build_frame_batch(
                timestamps_us=ts_us.take(idx),
                keys=keys.take(idx),
                values=values.take(idx),
                headers=headers.take(idx),
                timestamp_type=ts_type,
            )
            appends.append((p, frame, rows, None))
        return _ProducePlan(topic, n, part_list, timestamps_ms, appends, None)

    async def _execute(self, plan: _ProducePlan, acks: Acks = "all", per_record_errors: bool = False) -> ProduceResult:
        if len(plan.appends) == 1:
            partition, frame, _, max_ts = plan.appends[0]
            base = await self.append(plan.topic, partition, frame, acks, max_ts, plan.producer)
            return ProduceResult(partition, base, plan.timestamps_ms, plan.count)
        outcomes = await self._append_all(plan.topic, plan.appends, acks)
        unexpected = [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, LaketailError)]
        if unexpected:
            raise unexpected[0]
        failures = [o for o in outcomes if isinstance(o, LaketailError)]
        whole = whole_request_failure(failures, len(outcomes), per_record_errors)
        if whole is not None:
            raise whole
        offsets = [-1] * plan.count
        errors: list[LaketailError | None] | None = [None] * plan.count if failures else None
        for (_, _, rows, _), outcome in zip(plan.appends, outcomes):
            for j, row in enumerate(rows):
                if isinstance(outcome, LaketailError):
                    errors[row] = outcome  # type: ignore[index]
                else:
                    offsets[row] = outcome + j  # type: ignore[operator]
        return ProduceResult(plan.partitions, offsets, plan.timestamps_ms, plan.count, errors)

    async def append(
        self,
        topic: str,
        partition: int,
        frame: pa.RecordBatch,
        acks: Acks = "all",
        max_timestamp_us: int | None = None,
        producer: ProducerBatch | None = None,
    ) -> int:
        """Append one frame batch to the partition on its leader (here, or forwarded);
        return its base offset once ``acks`` is satisfied."""
        replicas = self.cluster.replicas
        if not replicas.leads(topic, partition) and not await replicas.wait_leading(topic, partition):
            sibling = self._sibling_leader(topic, partition)
            if sibling is not None:
                (outcome,) = await self._hand_off(sibling, topic, [Append(partition, frame, max_timestamp_us)],
                                                  acks, producer)
                if isinstance(outcome, LaketailError):
                    raise outcome
                return outcome
            return await self._forward_append(topic, partition, frame, acks, max_timestamp_us, producer)
        state = replicas.leader_state(topic, partition)  # raises when fenced
        config = self._runtime(topic).config
        min_insync = config.min_insync_replicas
        if acks == "all":
            replicas.check_min_isr(topic, partition, min_insync)
        plog = state.plog
        if self.bounded_hot_tier and topic not in INTERNAL_TOPICS and (producer is None or producer.control is None):
            plog.refuse_when_backlogged(local_retention_bytes(config))  # KAFKA_STORAGE_ERROR, nothing written
        base = await plog.append(
            frame, leader_epoch=state.reg.leader_epoch, max_timestamp_us=max_timestamp_us, producer=producer
        )
        self.tierer.wake(topic)
        if acks == "all":
            timeout = self.settings.request_timeout_ms / 1000
            await replicas.wait_replicated(topic, partition, base + frame.num_rows, min_insync, timeout)
        return base

    async def _append_all(self, topic: str, appends: list[tuple], acks: Acks) -> list[int | BaseException]:
        """Each of a plan's appends (``(partition, frame, rows, max timestamp us)``), its
        base offset or its error, in order: here, or the ones a sibling request process
        leads handed to it together (one hand-off per sibling), or forwarded."""
        by_sibling: dict[int, list[int]] = {}
        if self.handoff is not None:
            leads = self.cluster.replicas.leads
            for i, (partition, _, _, _) in enumerate(appends):
                if not leads(topic, partition):
                    sibling = self._sibling_leader(topic, partition)
                    if sibling is not None:
                        by_sibling.setdefault(sibling, []).append(i)
        if not by_sibling:
            return await asyncio.gather(*(
                self.append(topic, partition, frame, acks, max_ts) for partition, frame, _, max_ts in appends
            ), return_exceptions=True)
        handed = {i for rows in by_sibling.values() for i in rows}
        rest = [i for i in range(len(appends)) if i not in handed]
        results = await asyncio.gather(
            *(self._hand_off(sibling, topic, [Append(appends[i][0], appends[i][1], appends[i][3]) for i in rows], acks)
              for sibling, rows in by_sibling.items()),
            *(self.append(topic, appends[i][0], appends[i][1], acks, appends[i][3]) for i in rest),
            return_exceptions=True,
        )
        outcomes: list[int | BaseException] = [0] * len(appends)
        for rows, result in zip(by_sibling.values(), results):
            for i, outcome in zip(rows, result if isinstance(result, list) else [result] * len(rows)):
                outcomes[i] = outcome
        for i, result in zip(rest, results[len(by_sibling):]):
            outcomes[i] = result  # type: ignore[call-overload]
        return outcomes

    def _sibling_leader(self, topic: str, partition: int) -> int | None:
        """The id of the request process of this broker that leads the partition, when
        it is another one than this (the cluster image's leader among the siblings)."""
        if self.handoff is None:
            return None
        reg = self.cluster.image.partitions.get((topic, partition))
        if reg is None or reg.leader == self.settings.broker_id:
            return None
        if reg.leader not in self.settings.request_process_log_dirs:
            return None
        return reg.leader

    async def _hand_off(self, sibling: int, topic: str, appends: list[Append], acks: Acks,
                        producer: ProducerBatch | None = None) -> list[int | LaketailError]:
        """``appends`` handed to the sibling request process that leads their partitions
        (:mod:`laketail.handoff`); an append it refused before writing anything (its
        image and ours disagree on the leader), or all of them when its socket does not
        accept, go over the inter-broker listener instead, which waits for the image to
        settle."""
        assert self.handoff is not None
        try:
            # with the other appends to this sibling of this event-loop turn: one hop for them all
            outcomes = await self.handoff.send_gathered(
                sibling, topic, [replace(a, producer=producer) for a in appends] if producer else appends,
                "1" if acks == "0" else acks)
        except SiblingUnreachable as exc:
            log.info("hand-off to %s", exc)
            outcomes = [(REFUSED, LeaderNotAvailable(str(exc))) for _ in appends]
        out: list[int | LaketailError] = []
        for a, outcome in zip(appends, outcomes):
            if isinstance(outcome, int):
                out.append(outcome)
            elif outcome[0] == FAILED:
                out.append(outcome[1])
            else:
                try:
                    out.append(await self._forward_append(topic, a.partition, a.frame, acks, a.max_timestamp_us,
                                                          producer))
                except LaketailError as exc:
                    out.append(exc)
        return out

    async def _forward_append(self, topic, partition, frame, acks, max_timestamp_us, producer) -> int:
        if producer is None:  # under an internal idempotent identity, so a retry is never written twice
            return await self.cluster.forwarded.send(
                topic, partition, frame,
                lambda stamped, internal: self._forward_once(topic, partition, stamped, acks, max_timestamp_us,
                                                             internal),
            )
        return await self._forward_once(topic, partition, frame, acks, max_timestamp_us, producer)

    async def _forward_once(self, topic, partition, frame, acks, max_timestamp_us, producer) -> int:
        self.http_forwards += 1
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, frame.schema) as writer:
            writer.write_batch(frame)
        params = {"acks": acks if acks != "0" else "1"}
        if max_timestamp_us is not None:
            params["max_timestamp_us"] = str(max_timestamp_us)
        if producer is not None:
            params.update(
                producer_id=str(producer.producer_id), producer_epoch=str(producer.producer_epoch),
                base_sequence=str(producer.base_sequence), transactional=str(producer.transactional).lower(),
            )
            if producer.control is not None:
                params["control"] = producer.control
        resp = await self.cluster.call_leader(
            topic, partition, "POST", f"{INTERNAL}/partitions/{topic}/{partition}/append",
            params=params, content=sink.getvalue().to_pybytes(),
            content_type="application/vnd.apache.arrow.stream",
            timeout=self.settings.request_timeout_ms / 1000 + 5,
        )
        return resp.json()["base_offset"]

    def _check_sizes(self, keys: pa.Array, values: pa.Array, headers: pa.Array, limit: int) -> None:
        sizes = self._record_sizes(keys, values, headers, limit)
        if sizes is None:
            return
        biggest = pc.max(sizes).as_py() or 0
        if biggest > limit:
            index = pc.index(sizes, biggest).as_py()
            raise RecordTooLarge(
                f"record {index} is {biggest} bytes with its batch overhead, above max.message.bytes={limit}"
            )

    @staticmethod
    def _record_sizes(keys: pa.Array, values: pa.Array, headers: pa.Array, limit: int) -> pa.Array | None:
        """Each record's size as Kafka counts it against ``max.message.bytes`` (key,
        value, header keys and values, :data:`RECORD_SIZE_OVERHEAD`); ``None`` when
        every record fits for sure."""
        buffers = keys.get_total_buffer_size() + values.get_total_buffer_size() + headers.get_total_buffer_size()
        if buffers + RECORD_SIZE_OVERHEAD <= limit:
            return None  # even all the buffers together fit: no single record can be too large
        sizes = pc.add(
            pc.fill_null(pc.binary_length(values), 0), pc.fill_null(pc.binary_length(keys), 0)
        )
        if headers.null_count < len(headers):
            flat = pc.list_flatten(headers)
            if len(flat):
                per_header = pc.add(
                    pc.fill_null(pc.binary_length(flat.field("key")), 0),
                    pc.fill_null(pc.binary_length(flat.field("value")), 0),
                )
                parents = pc.list_parent_indices(headers)
                totals = [0] * len(headers)
                for parent, size in zip(parents.to_pylist(), per_header.to_pylist()):
                    totals[parent] += size
                sizes = pc.add(sizes, pa.array(totals, pa.int64()))
        return pc.add(sizes.cast(pa.int64()), RECORD_SIZE_OVERHEAD)

    def _sticky(self, runtime: TopicRuntime) -> int:
        """The partition of a request's keyless records. One of several request
        processes of a broker keeps them to partitions it leads, when it leads any:
        the request's connection reached it by the kernel's choice, and a partition it
        leads costs no forwarding (:mod:`laketail.request_processes`)."""
        info = runtime.info
        if self.settings.request_processes > 1:
            leads = self.cluster.replicas.leads
            own = [p for p in range(info.partitions) if leads(info.name, p)]
            if own:
                return runtime.sticky.next_batch_among(own)
        return runtime.sticky.next_batch(info.partitions)

    def _assign_partitions(
        self, runtime: TopicRuntime, keys: pa.Array, explicit: pa.Array | None
    ) -> pa.Array | int:
        """Each record's partition, or one ``int`` when the whole request goes to one."""
        info = runtime.info
        n = len(keys)
        if explicit is not None and explicit.null_count == 0:
            bounds = pc.min_max(explicit)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if low < 0 or high >= info.partitions:
                raise UnknownTopicOrPartition.partition(info.name, low if low < 0 else high)
            return low if low == high else explicit.cast(pa.int32())
        if (explicit is None or explicit.null_count == n) and keys.null_count == n:
            return self._sticky(runtime)
        explicit_list = explicit.to_pylist() if explicit is not None else [None] * n
        sticky = None
        out = []
        for key, p in zip(keys.to_pylist() if keys.null_count < n else [None] * n, explicit_list):
            if p is not None:
                if not 0 <= p < info.partitions:
                    raise UnknownTopicOrPartition.partition(info.name, p)
            elif key is not None:
                p = partition_for_key(key, info.partitions)
            else:
                if sticky is None:
                    sticky = self._sticky(runtime)
                p = sticky
            out.append(p)
        return pa.array(out, pa.int32())
