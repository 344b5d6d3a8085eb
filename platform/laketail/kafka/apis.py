"""Kafka's APIs over the broker's services: one method per API key.

:class:`KafkaApis` is to the Kafka listener what the FastAPI routes are to HTTP: it
takes a decoded request (:mod:`laketail.kafka.protocol`), authorizes it with the same
:class:`~laketail.security.authorizer.Authorizer` as the gateway (Kafka's resource and
operation per API, as Kafka's ``AclAuthorizer`` documents them), calls the same public
broker methods the routes call (``produce``, ``fetch``, ``partition_state_async``,
``offset_for_timestamp``, ``topic_for_produce``, ``groups``, ``transactions``) and
answers in Kafka's layout with Kafka's error codes (``LaketailError.kafka_code``). It
holds no state of its own but the fetch sessions (KIP-227, which only shape answers): a
record produced here is the record REST reads, a group joined here is the group v3
describes.

Differences from Kafka's broker, on purpose or not yet done:

* Metadata lists the live brokers at their registered Kafka listener of the same name
  (``BrokerRegistration.endpoints``) and each partition's leader, replicas, ISR and
  leader epoch from the cluster image; Produce and Fetch of a partition led elsewhere
  answer NOT_LEADER_OR_FOLLOWER (:mod:`laketail.kafka.leadership`).
* The group coordinator assigns partitions itself (docs/architecture.md §9): JoinGroup
  gives the leader the members' subscriptions so the client runs, but SyncGroup answers
  every member the coordinator's assignment and ignores the leader's.
* Incremental fetch sessions (KIP-227) are kept per broker by
  :class:`~laketail.kafka.fetch_session.FetchSessionCache`, Kafka's rules, except that a
  session belongs to the principal that opened it.
* CreateTopics takes no explicit replica assignments (INVALID_REQUEST) and answers no
  configs; DeleteTopics names topics (v6's topic ids are not served).
* Transactions (InitProducerId, AddPartitionsToTxn, EndTxn, ...) are in
  :mod:`laketail.kafka.txn`, over the same transaction coordinator as ``/v1``.
* The admin APIs for configs, groups and the cluster, and ACLs are in
  :mod:`laketail.kafka.configs`, :mod:`laketail.kafka.admin` and
  :mod:`laketail.kafka.acls`; CreatePartitions is in :mod:`laketail.kafka.admin`.
* Group and transaction coordination only on the controller (this broker alone, or the
  cluster's controller): FindCoordinator names the controller, whichever broker is asked,
  and group requests elsewhere answer NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS on a
  new controller still loading), which sends the client back to FindCoordinator.
* A broker served by several request processes is one broker to Kafka clients; what a
  process does for partitions and coordinators its siblings hold is in
  :mod:`laketail.kafka.siblings`.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from kio.index import load_entity_schema
from kio.serial import entity_reader
from kio.static.constants import EntityType

from laketail.cluster.metadata import NO_LEADER
from laketail.coordinator.assignors import ASSIGNORS
from laketail.coordinator.offsets import CommittedOffset
from laketail.errors import InconsistentGroupProtocol, LaketailError, ProducerFenced
from laketail.kafka import records, sasl
from laketail.kafka.acl_codes import NOT_ASKED, authorized_operations
from laketail.kafka.fetch_session import FINAL_EPOCH, INVALID_SESSION_ID, FetchSessionCache
from laketail.kafka.leadership import LeaderGate
from laketail.kafka.protocol import API_VERSIONS, SUPPORTED, Request, build, decode_request, encode_response, ms
from laketail.kafka.siblings import Siblings
from laketail.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from laketail.security.principal import KafkaPrincipal
from laketail.storage.partition_log import ProducerBatch

if TYPE_CHECKING:
    from laketail.broker import Broker
    from laketail.security.authorizer import Authorizer

log = logging.getLogger(__name__)

Op, R = AclOperation, ResourceType
# Kafka's error codes the edge answers itself (the rest come from LaketailError.kafka_code)
UNKNOWN_SERVER_ERROR = -1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_REQUIRED_ACKS = 21
INCONSISTENT_GROUP_PROTOCOL = 23
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
KAFKA_STORAGE_ERROR = 56
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNKNOWN_TOPIC_ID = 100
ACKS = {0: "0", 1: "1", -1: "all"}


def error_code(exc: BaseException) -> int:
    """Kafka's code for an exception raised by a broker service."""
    if isinstance(exc, LaketailError):
        return exc.kafka_code
    log.error("unexpected error answering a Kafka request", exc_info=exc)
    return UNKNOWN_SERVER_ERROR


def error_message(exc: BaseException) -> str | None:
    """The message a laketail error carries to the client (others carry none)."""
    return exc.message if isinstance(exc, LaketailError) else None


class Session:
    """Who is at the other end of one connection (PLAINTEXT: ``User:ANONYMOUS``)."""

    __slots__ = ("principal", "host")

    def __init__(self, principal: KafkaPrincipal, host: str) -> None:
        self.principal = principal
        self.host = host


class ApiPart:
    """A group of APIs served beside :class:`KafkaApis` (transactions, configs, admin,
    ACLs), sharing its broker, authorizer and views. Stateless; event loop thread only."""

    def __init__(self, apis: "KafkaApis") -> None:
        self.broker = apis.broker
        self.authorizer = apis.authorizer
        self.coordinates = apis.coordinates
        self.coordinator_error = apis.coordinator_error
        self.brokers = apis.brokers
        self.controller_id = apis.controller_id
        self.siblings = apis.siblings

    def _allowed(self, session: Session, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> bool:
        return self.authorizer.authorize(session.principal, session.host, op, rtype, name)


class KafkaApis:
    """Answers Kafka requests for one broker; ``advertised`` is the Kafka listener's
    (host, port), what Metadata and FindCoordinator answer for this broker, and
    ``listener_name`` its name: other brokers are listed at their listener of that name,
    as Kafka's Metadata does. Event loop thread only."""

    def __init__(self, broker: "Broker", authorizer: "Authorizer", advertised: tuple[str, int],
                 listener_name: str = "KAFKA", fetch_sessions: FetchSessionCache | None = None) -> None:
        self.broker = broker
        # one cache per broker, shared by its Kafka listeners (kafka_listeners passes it)
        self.fetch_sessions = fetch_sessions or FetchSessionCache(
            broker.settings.max_incremental_fetch_session_cache_slots)
        self.authorizer = authorizer
        self.host, self.port = advertised
        self.listener_name = listener_name
        #: the other request processes of this broker (laketail.kafka.siblings)
        self.siblings = Siblings(broker)
        self.handlers: dict[int, Callable[[Request, Session], Awaitable[dict | None]]] = {
            0: self.produce, 1: self.fetch, 2: self.list_offsets, 3: self.metadata, 8: self.offset_commit,
            9: self.offset_fetch, 10: self.find_coordinator, 11: self.join_group, 12: self.heartbeat,
            13: self.leave_group, 14: self.sync_group, 15: self.describe_groups, 16: self.list_groups,
            18: self.api_versions, 19: self.create_topics, 20: self.delete_topics,
        }
        from laketail.kafka.acls import AclApis  # noqa: PLC0415 - they build on this module
        from laketail.kafka.admin import AdminApis  # noqa: PLC0415
        from laketail.kafka.configs import ConfigApis  # noqa: PLC0415
        from laketail.kafka.epochs import EpochApis  # noqa: PLC0415
        from laketail.kafka.txn import TransactionApis  # noqa: PLC0415
        from laketail.kafka.txn_admin import TransactionAdminApis  # noqa: PLC0415

        for part in (TransactionApis(self), ConfigApis(self), AdminApis(self), AclApis(self), EpochApis(self),
                     TransactionAdminApis(self)):
            self.handlers.update(part.handlers)
        self.handlers.update(sasl.AFTER_AUTHENTICATION)  # the SASL exchange itself is sasl.SaslGate's
        self.leader_gate = LeaderGate(self)  # Produce and Fetch only on the partition's leader
        self._names_by_id: dict[uuid.UUID, str] = {}  # KIP-516's topic ids (Fetch v13+), see _names_of
        self.handlers[0] = self.leader_gate.produce(self.handlers[0])
        assert set(self.handlers) == set(SUPPORTED), "every served API has a handler and only those"

    async def handle(self, request: Request, session: Session) -> Any:
        """The response entity, or None when the request gets no answer (acks=0)."""
        data = await self.handlers[request.api_key](request, session)
        return None if data is None else build(request.response_type, data)

    async def answer(self, request: Request, session: Session) -> bytes | None:
        """The response frame (size prefix included), or None when the request gets no
        answer: here, or from the sibling request process that runs the coordinators
        (:mod:`laketail.kafka.siblings`)."""
        if self.siblings.passes(request):
            return await self.siblings.pass_on(request, session, self.listener_name)
        response = await self.handle(request, session)
        return None if response is None else encode_response(request, response)

    async def answer_passed(self, frame: bytes, session: Session) -> bytes | None:
        """A request a sibling request process passed on (:meth:`answer` there), answered
        here and never passed again; CloseConnection when the frame does not decode."""
        request = decode_request(frame)
        response = await self.handle(request, session)
        return None if response is None else encode_response(request, response)

    def _allowed(self, session: Session, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> bool:
        return self.authorizer.authorize(session.principal, session.host, op, rtype, name)

    # -- ApiVersions, Metadata ------------------------------------------------------------------

    async def api_versions(self, request: Request, session: Session) -> dict:
        keys = [{"api_key": k, "min_version": low, "max_version": high} for k, (_, low, high) in SUPPORTED.items()]
        _, low, high = SUPPORTED[API_VERSIONS]
        code = 0 if low <= request.api_version <= high else UNSUPPORTED_VERSION
        return {"error_code": code, "api_keys": keys, "throttle_time": 0}

    def brokers(self) -> list[dict]:
        """The brokers Metadata and DescribeCluster list: the live ones with a Kafka
        listener of this one's name, at its advertised address (this broker always),
        each once however many request processes serve it."""
        me = self.siblings.node_id
        found = {me: {"node_id": me, "host": self.host, "port": self.port, "rack": None}}
        for b in self.broker.brokers():
            node = self.siblings.outward(b.broker_id)
            if node not in found and self.listener_name in b.endpoints:
                host, port = b.endpoints[self.listener_name]
                found[node] = {"node_id": node, "host": host, "port": port, "rack": None}
        return [found[node] for node in sorted(found)]

    def controller_id(self) -> int:
        """The cluster's controller (this broker when alone or before the first image)."""
        controller = self.broker.controller_id
        return self.siblings.outward(controller) if controller != NO_LEADER else self.siblings.node_id

    async def metadata(self, request: Request, session: Session) -> dict:
        body = request.body
        allow_create = request.api_version < 4 or body.allow_auto_topic_creation
        if body.topics is None or (request.api_version == 0 and not body.topics):
            names = [n for n in self.broker.list_topics(include_internal=False)
                     if self.authorizer.authorize(session.principal, session.host, Op.DESCRIBE, R.TOPIC, n,
                                                  audit_denied=False)]
        else:
            names = [t.name for t in body.topics]
        listed = {b["node_id"] for b in self.brokers()}
        topics = [await self._topic_metadata(name, session, allow_create, listed) for name in names]
        out = {"throttle_time": 0, "brokers": self.brokers(), "cluster_id": self.broker.cluster_id or None,
               "controller_id": self.controller_id(), "topics": topics, "cluster_authorized_operations": NOT_ASKED}
        if getattr(body, "include_topic_authorized_operations", False):  # KIP-430 (v8+)
            for t in topics:
                t["topic_authorized_operations"] = 0 if t["error_code"] else authorized_operations(
                    self.authorizer, session.principal, session.host, R.TOPIC, t["name"])
        if getattr(body, "include_cluster_authorized_operations", False):  # v8-10
            out["cluster_authorized_operations"] = authorized_operations(
                self.authorizer, session.principal, session.host, R.CLUSTER) if self._allowed(
                session, Op.DESCRIBE, R.CLUSTER) else 0
        return out

    async def _topic_metadata(self, name: str, session: Session, allow_create: bool, listed: set[int]) -> dict:
        out: dict[str, Any] = {"name": name, "error_code": 0, "is_internal": False, "partitions": []}
        if not self._allowed(session, Op.DESCRIBE, R.TOPIC, name):
            out["error_code"] = TOPIC_AUTHORIZATION_FAILED
            return out
        try:
            if allow_create and self.broker.would_auto_create(name):
                if not (self._allowed(session, Op.CREATE, R.CLUSTER) or self._allowed(session, Op.CREATE, R.TOPIC,
                                                                                      name)):
                    out["error_code"] = TOPIC_AUTHORIZATION_FAILED
                    return out
                info = await self.broker.topic_for_produce(name)
            else:
                info = self.broker.topic(name)
        except Exception as exc:  # noqa: BLE001 - answered as the topic's error code
            out["error_code"] = error_code(exc)
            return out
        out["is_internal"] = info.internal
        out["topic_id"] = uuid.UUID(info.topic_id)  # Metadata v10+ (KIP-516): what Fetch v13+ names it by
        out["partitions"] = [self._partition_metadata(name, p, listed) for p in range(info.partitions)]
        return out

    def _partition_metadata(self, topic: str, partition: int, listed: set[int]) -> dict:
        """One partition as the cluster image has it. A partition without a leader, or
        whose leader has no listener Metadata lists, is LEADER_NOT_AVAILABLE (leader -1),
        as Kafka's KRaft metadata cache answers; a broker without a cluster image (no
        replica registered yet) names itself."""
        state = self.broker.partition_state(topic, partition)
        me = self.siblings.node_id
        outward, outward_all = self.siblings.outward, self.siblings.outward_all
        leader, replicas, isr = outward(state.leader), outward_all(state.replicas), outward_all(state.isr)
        if leader == NO_LEADER and not replicas:
            leader, replicas, isr = me, [me], [me]
        code = 0 if leader in listed else LEADER_NOT_AVAILABLE
        return {"error_code": code, "partition_index": partition, "leader_id": leader if code == 0 else NO_LEADER,
                "leader_epoch": state.leader_epoch, "replica_nodes": replicas, "isr_nodes": isr,
                "offline_replicas": [r for r in replicas if r not in listed]}

    # -- Produce ---------------------------------------------------------------------------------

    async def produce(self, request: Request, session: Session) -> dict | None:
        body = request.body
        acks = ACKS.get(body.acks)
        txn_denied = body.transactional_id is not None and not self._allowed(
            session, Op.WRITE, R.TRANSACTIONAL_ID, body.transactional_id)
        work = []
        for topic in body.topic_data:
            for part in topic.partition_data:
                work.append((topic.name, part.index, part.records))
        if acks is None:
            results = [{"error_code": INVALID_REQUIRED_ACKS} for _ in work]
        elif txn_denied:
            results = [{"error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED} for _ in work]
        else:
            results = list(await asyncio.gather(*(self._produce_partition(t, p, r, acks, session)
                                                  for t, p, r in work)))
            if request.api_version <= 3:  # Kafka's ProduceResponse: v3 clients may not know code 56 and
                for result in results:   # take it for a fatal unknown error; NOT_LEADER_OR_FOLLOWER is retried
                    if result["error_code"] == KAFKA_STORAGE_ERROR:
                        result["error_code"] = NOT_LEADER_OR_FOLLOWER
        if body.acks == 0:
            return None  # Kafka answers nothing to acks=0, not even an error
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition, _), result in zip(work, results):
            by_topic.setdefault(topic, []).append({"index": partition, "base_offset": -1, "log_start_offset": -1,
                                                   "record_errors": [], "error_message": None, **result})
        return {"responses": [{"name": t, "partition_responses": ps} for t, ps in by_topic.items()],
                "throttle_time": 0}

    async def _produce_partition(self, topic: str, partition: int, raw: bytes | None, acks: Any,
                                 session: Session) -> dict:
        if not self._allowed(session, Op.WRITE, R.TOPIC, topic):
            return {"error_code": TOPIC_AUTHORIZATION_FAILED}
        try:
            self.broker.check_partition(topic, partition)
            batches = [records.decode_batch(b) for b in records.split_batches(bytes(raw or b""))]
            if not batches:
                return {"error_code": CORRUPT_MESSAGE, "error_message": "no record batch"}
            base = -1
            for batch in batches:  # validated all first: a bad batch writes nothing
                producer = None
                if batch.producer_id >= 0:  # a transactional batch joins its transaction in produce_batch
                    producer = ProducerBatch(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                             batch.transactional)
                keys, values, headers = records.columns(batch)
                offset = await self.broker.produce_batch(topic, partition, keys, values, headers,
                                                         batch.timestamps_ms, acks, producer)
                if base < 0:
                    base = offset
            state = self.broker.partition_state(topic, partition)
            return {"error_code": 0, "base_offset": base, "log_start_offset": state.log_start_offset}
        except Exception as exc:  # noqa: BLE001 - answered as the partition's error code
            message = exc.message if isinstance(exc, LaketailError) else None
            # Kafka's log answers a fenced producer INVALID_PRODUCER_EPOCH, never PRODUCER_FENCED
            code = INVALID_PRODUCER_EPOCH if isinstance(exc, ProducerFenced) else error_code(exc)
            return {"error_code": code, "error_message": message}

    # -- Fetch, ListOffsets ----------------------------------------------------------------------

    async def fetch(self, request: Request, session: Session) -> dict:
        body = request.body
        forgotten_topics = getattr(body, "forgotten_topics_data", ())
        by_id = request.api_version >= 13  # KIP-516: from v13 topics are named by id
        names = self._names_of([t.topic_id for t in (*body.topics, *forgotten_topics)]) if by_id else {}

        def name_of(t: Any) -> str | None:
            return names.get(t.topic_id) if by_id else t.topic

        requested = {(name, p.partition): (p.fetch_offset, p.partition_max_bytes)
                     for t in body.topics if (name := name_of(t)) is not None for p in t.partitions}
        unknown_ids = [(t.topic_id, p.partition) for t in body.topics if name_of(t) is None for p in t.partitions]
        forgotten = [(name, p) for t in forgotten_topics if (name := name_of(t)) is not None for p in t.partitions]
        context = self.fetch_sessions.new_context(  # v4-6 have no session: sessionless (0, -1)
            getattr(body, "session_id", INVALID_SESSION_ID), getattr(body, "session_epoch", FINAL_EPOCH),
            requested, forgotten, session.principal, self.broker.clock.now_ms())
        isolation = "read_committed" if body.isolation_level == 1 else "read_uncommitted"
        wanted = context.wanted
        answers = list(await asyncio.gather(*(self._fetch_one(t, p, o, m, 0, isolation, session)
                                              for t, p, o, m in wanted)))
        wait_ms = ms(body.max_wait)
        if wait_ms > 0 and wanted and sum(len(a["records"]) for a in answers) < max(body.min_bytes, 1) and all(
                a["error_code"] == 0 for a in answers) and not unknown_ids:  # an error answers at once, as Kafka's
            answers = await self._long_poll(wanted, answers, wait_ms, isolation, session)
        answer = context.respond([((t, p), a) for (t, p, _, _), a in zip(wanted, answers)],
                                 self.broker.clock.now_ms())
        by_topic: dict[str, list[dict]] = {}
        for (topic, _), part in answer.partitions:
            by_topic.setdefault(topic, []).append(part)
        ids = {name: topic_id for topic_id, name in names.items()}  # a session's other topics: looked up
        responses = [{"topic": t, "topic_id": (ids.get(t) or self._topic_id(t)) if by_id else None, "partitions": ps}
                     for t, ps in by_topic.items()]
        for topic_id, partition in unknown_ids:  # answered, and never kept in the session (as Kafka does)
            responses.append({"topic_id": topic_id, "partitions": [
                {**_empty_fetch_partition(partition), "error_code": UNKNOWN_TOPIC_ID}]})
        out = {"throttle_time": 0, "error_code": answer.error_code, "session_id": answer.session_id,
               "responses": responses}
        if request.api_version >= 16:  # KIP-951: where the refused partitions' leaders listen
            leaders = {part["current_leader"]["leader_id"] for ps in by_topic.values() for part in ps
                       if "current_leader" in part}
            out["node_endpoints"] = self.leader_gate.endpoints_of(leaders)
        return out

    def _topic_id(self, name: str) -> uuid.UUID | None:
        """The topic's id (KIP-516); None, written as the zero id, for one the catalog no
        longer has (a fetch session's topic deleted since)."""
        try:
            return uuid.UUID(self.broker.topic(name).topic_id)
        except Exception:  # noqa: BLE001 - unknown topic
            return None

    def _names_of(self, ids: list[uuid.UUID | None]) -> dict[uuid.UUID, str]:
        """The topics Fetch v13+ names by id, those the catalog has. Held between requests
        and checked against the catalog on use (a topic deleted and created again under its
        name gets a new id); an id not held rebuilds the map."""
        known: dict[uuid.UUID, str] = {}
        for topic_id in ids:
            if topic_id is None:  # the zero id: no topic has it
                continue
            name = self._names_by_id.get(topic_id)
            if name is not None and self._topic_id(name) == topic_id:
                known[topic_id] = name
            else:
                self._names_by_id = {tid: n for n in self.broker.list_topics()
                                     if (tid := self._topic_id(n)) is not None}
                return {i: self._names_by_id[i] for i in ids if i is not None and i in self._names_by_id}
        return known

    async def _long_poll(self, wanted: list, answers: list[dict], wait_ms: int, isolation: str,
                         session: Session) -> list[dict]:
        """Wait up to ``wait_ms`` for any partition to get records (each fetch long-polls
        at its high watermark); the first that does answers for all."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        tasks = [asyncio.ensure_future(self._fetch_one(t, p, o, m, wait_ms, isolation, session))
                 for t, p, o, m in wanted]
        pending = set(tasks)
        found = False
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if any(t.result()["records"] or t.result()["error_code"] for t in done):
                    found = True
                    break
            if not found and loop.time() < deadline:
                # every read came back empty without waiting (read_committed at the last
                # stable offset of an open transaction): wait out max_wait_ms, as Kafka's
                # delayed fetch does, rather than have the client fetch again at once
                await asyncio.sleep(deadline - loop.time())
        finally:
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        return [t.result() if t.done() and not t.cancelled() else a for t, a in zip(tasks, answers)]

    async def _fetch_one(self, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int,
                         isolation: Any, session: Session) -> dict:
        out = _empty_fetch_partition(partition)
        if not self._allowed(session, Op.READ, R.TOPIC, topic):
            out["error_code"] = TOPIC_AUTHORIZATION_FAILED
            return out
        if refusal := self.leader_gate.fetch_refusal(topic, partition):
            out.update(refusal)
            return out
        try:
            result = await self.broker.fetch(topic, partition, offset, max_bytes=max_bytes, timeout_ms=wait_ms,
                                             isolation=isolation)
        except Exception as exc:  # noqa: BLE001 - answered as the partition's error code
            out["error_code"] = error_code(exc)
            return out
        out.update(high_watermark=result.high_watermark, last_stable_offset=result.last_stable_offset,
                   log_start_offset=result.log_start_offset,
                   records=records.encode_records(result.records, result.next_offset, offset))
        return out

    async def list_offsets(self, request: Request, session: Session) -> dict:
        body = request.body
        committed = getattr(body, "isolation_level", 0) == 1
        topics = []
        for topic in body.topics:
            parts = [await self._list_offset(topic.name, p.partition_index, p.timestamp, committed, session)
                     for p in topic.partitions]
            topics.append({"name": topic.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    async def _list_offset(self, topic: str, partition: int, timestamp: int, committed: bool,
                           session: Session) -> dict:
        out: dict[str, Any] = {"partition_index": partition, "error_code": 0, "timestamp": -1, "offset": -1,
                               "leader_epoch": -1}
        if not self._allowed(session, Op.DESCRIBE, R.TOPIC, topic):
            out["error_code"] = TOPIC_AUTHORIZATION_FAILED
            return out
        try:
            state = await self.broker.partition_state_async(topic, partition)
            out["leader_epoch"] = state.leader_epoch
            if timestamp == -1:  # LATEST
                out["offset"] = state.last_stable_offset if committed else state.high_watermark
            elif timestamp == -2:  # EARLIEST
                out["offset"] = state.log_start_offset
            elif timestamp >= 0:
                found = await self.broker.offset_for_timestamp(topic, partition, timestamp)
                if found is not None:
                    out["offset"], out["timestamp"] = found
            else:  # -3 MAX_TIMESTAMP and later specials: not served (ListOffsets stops at v6)
                out["error_code"] = UNSUPPORTED_VERSION
        except Exception as exc:  # noqa: BLE001 - answered as the partition's error code
            out["error_code"] = error_code(exc)
        return out

    # -- admin: CreateTopics, DeleteTopics -------------------------------------------------------

    async def create_topics(self, request: Request, session: Session) -> dict:
        body = request.body
        may_create_any = self._allowed(session, Op.CREATE, R.CLUSTER)
        topics = []
        for t in body.topics:
            out: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None, "num_partitions": -1,
                                   "replication_factor": -1, "configs": []}
            if not (may_create_any or self._allowed(session, Op.CREATE, R.TOPIC, t.name)):
                out["error_code"] = TOPIC_AUTHORIZATION_FAILED
            elif t.assignments:
                out.update(error_code=INVALID_REQUEST, error_message="explicit replica assignments are not served")
            else:
                try:
                    info = await self.broker.create_topic(
                        t.name, None if t.num_partitions == -1 else t.num_partitions,
                        None if t.replication_factor == -1 else t.replication_factor,
                        {c.name: c.value for c in t.configs}, validate_only=body.validate_only)
                    out.update(num_partitions=info.partitions, replication_factor=info.replication_factor)
                except Exception as exc:  # noqa: BLE001 - answered as the topic's error code
                    out.update(error_code=error_code(exc),
                               error_message=exc.message if isinstance(exc, LaketailError) else None)
            topics.append(out)
        return {"throttle_time": 0, "topics": topics}

    async def delete_topics(self, request: Request, session: Session) -> dict:
        responses = []
        for name in request.body.topic_names:
            out: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
            if not self._allowed(session, Op.DELETE, R.TOPIC, name):
                out["error_code"] = TOPIC_AUTHORIZATION_FAILED
            else:
                try:
                    await self.broker.delete_topic(name)
                except Exception as exc:  # noqa: BLE001 - answered as the topic's error code
                    out.update(error_code=error_code(exc),
                               error_message=exc.message if isinstance(exc, LaketailError) else None)
            responses.append(out)
        return {"throttle_time": 0, "responses": responses}

    # -- coordinators ----------------------------------------------------------------------------

    def coordinates(self) -> bool:
        """Whether this broker runs the group and transaction coordinators."""
        return self.broker.controller_id in (self.broker.broker_id, -1)

    def coordinator_error(self) -> int:
        """0 when the coordinators here may answer; else Kafka's code that sends the client
        back to FindCoordinator: COORDINATOR_LOAD_IN_PROGRESS while a new controller loads
        ``__consumer_offsets``, NOT_COORDINATOR on a broker that does not run them (the
        client's coordinator was deposed or died, and another broker is the controller)."""
        try:
            self.broker.check_coordinating()
        except LaketailError as exc:
            return exc.kafka_code
        return 0

    async def find_coordinator(self, request: Request, session: Session) -> dict:
        body = request.body
        key_type = getattr(body, "key_type", 0)
        coordinator = self.controller_id()  # groups and transactions are coordinated on the controller
        found = next((b for b in self.brokers() if b["node_id"] == coordinator), None)
        out: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None, "node_id": -1,
                               "host": "", "port": -1}
        if found is not None:
            out.update(node_id=coordinator, host=found["host"], port=found["port"])
        if key_type == 0 and not self._allowed(session, Op.DESCRIBE, R.GROUP, body.key):
            out.update(error_code=GROUP_AUTHORIZATION_FAILED, node_id=-1, host="", port=-1)
        elif key_type == 1 and not self._allowed(session, Op.DESCRIBE, R.TRANSACTIONAL_ID, body.key):
            out.update(error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED, node_id=-1, host="", port=-1)
        elif key_type not in (0, 1) or found is None or (coordinator == self.siblings.node_id
                                                          and not self.coordinates()
                                                          and not self.siblings.coordinators_elsewhere()):
            out.update(error_code=COORDINATOR_NOT_AVAILABLE, node_id=-1, host="", port=-1,
                       error_message="the coordinator (the cluster's controller) has no Kafka listener known here")
        return out

    async def join_group(self, request: Request, session: Session) -> dict:
        body = request.body
        out: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "generation_id": -1, "protocol_type": "consumer",
                               "protocol_name": "", "leader": "", "member_id": body.member_id, "members": []}
        if not self._allowed(session, Op.READ, R.GROUP, body.group_id):
            return {**out, "error_code": GROUP_AUTHORIZATION_FAILED}
        if code := self.coordinator_error():
            return {**out, "error_code": code}
        if body.protocol_type != "consumer" or not body.protocols:
            return {**out, "error_code": INCONSISTENT_GROUP_PROTOCOL}
        try:
            topics, owned = _subscription(body.protocols[0].metadata)
            offered = [p.name for p in body.protocols]
            session_ms = ms(body.session_timeout)
            rebalance_ms = ms(body.rebalance_timeout) if request.api_version >= 1 else session_ms
            result = await self.broker.groups.join(
                body.group_id, body.member_id, topics=topics,
                strategies=list(dict.fromkeys(_strategy(name) for name in offered)),
                client_id=request.client_id or "kafka", client_host=session.host,
                session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                owned=owned or None,
            )
        except Exception as exc:  # noqa: BLE001 - answered as the group's error code
            return {**out, "error_code": error_code(exc)}
        members = []
        if result.members:
            group = self.broker.groups.describe(body.group_id)
            for member_id in result.members:
                member = group.members.get(member_id)
                members.append({"member_id": member_id, "group_instance_id": None,
                                "metadata": _encode_subscription(member.topics if member else [])})
        # the client's own name for the strategy the coordinator chose (its assignor looks it up)
        protocol = next((name for name in offered if _strategy(name) == result.protocol), result.protocol)
        return {**out, "generation_id": result.generation_id, "protocol_name": protocol,
                "leader": result.leader_id, "member_id": result.member_id, "members": members}

    async def sync_group(self, request: Request, session: Session) -> dict:
        body = request.body
        out: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "protocol_type": "consumer",
                               "protocol_name": getattr(body, "protocol_name", None), "assignment": b""}
        if not self._allowed(session, Op.READ, R.GROUP, body.group_id):
            return {**out, "error_code": GROUP_AUTHORIZATION_FAILED}
        if code := self.coordinator_error():
            return {**out, "error_code": code}
        try:
            assignment = self.broker.groups.sync(body.group_id, body.generation_id, body.member_id)
        except Exception as exc:  # noqa: BLE001
            return {**out, "error_code": error_code(exc)}
        return {**out, "assignment": _encode_assignment(assignment)}

    async def heartbeat(self, request: Request, session: Session) -> dict:
        body = request.body
        if not self._allowed(session, Op.READ, R.GROUP, body.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
        if code := self.coordinator_error():
            return {"throttle_time": 0, "error_code": code}
        try:
            self.broker.groups.heartbeat(body.group_id, body.generation_id, body.member_id)
        except Exception as exc:  # noqa: BLE001
            return {"throttle_time": 0, "error_code": error_code(exc)}
        return {"throttle_time": 0, "error_code": 0}

    async def leave_group(self, request: Request, session: Session) -> dict:
        body = request.body
        ids = [m.member_id for m in body.members] if request.api_version >= 3 else [body.member_id]
        if not self._allowed(session, Op.READ, R.GROUP, body.group_id):
            return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "members": []}
        if code := self.coordinator_error():
            return {"throttle_time": 0, "error_code": code, "members": []}
        members = []
        for member_id in ids:
            try:
                self.broker.groups.leave(body.group_id, member_id)
                code = 0
            except Exception as exc:  # noqa: BLE001
                code = error_code(exc)
            members.append({"member_id": member_id, "group_instance_id": None, "error_code": code})
        top = members[0]["error_code"] if request.api_version < 3 and members else 0
        return {"throttle_time": 0, "error_code": top, "members": members}

    async def describe_groups(self, request: Request, session: Session) -> dict:
        groups = []
        for group_id in request.body.groups:
            out: dict[str, Any] = {"error_code": 0, "group_id": group_id, "group_state": "Dead",
                                   "protocol_type": "", "protocol_data": "", "members": []}
            if not self._allowed(session, Op.DESCRIBE, R.GROUP, group_id):
                out["error_code"] = GROUP_AUTHORIZATION_FAILED
            elif code := self.coordinator_error():
                out["error_code"] = code
            else:
                group = self.broker.groups.describe(group_id)
                out.update(group_state=group.state, protocol_type="consumer" if group.members else "",
                           protocol_data=group.protocol or "", members=[
                               {"member_id": m.member_id, "group_instance_id": None, "client_id": m.client_id,
                                "client_host": m.client_host, "member_metadata": _encode_subscription(m.topics),
                                "member_assignment": _encode_assignment(m.assignment)}
                               for m in group.members.values()])
            groups.append(out)
        return {"throttle_time": 0, "groups": groups}

    async def list_groups(self, request: Request, session: Session) -> dict:
        states = set(getattr(request.body, "states_filter", ()) or ())
        everything = self._allowed(session, Op.DESCRIBE, R.CLUSTER)
        groups = []
        if code := self.coordinator_error():
            return {"throttle_time": 0, "error_code": code, "groups": []}
        for group in self.broker.groups.list_groups():
            if states and group.state not in states:
                continue
            if everything or self.authorizer.authorize(session.principal, session.host, Op.DESCRIBE, R.GROUP,
                                                       group.group_id, audit_denied=False):
                groups.append({"group_id": group.group_id, "protocol_type": "consumer", "group_state": group.state})
        return {"throttle_time": 0, "error_code": 0, "groups": groups}

    async def offset_commit(self, request: Request, session: Session) -> dict:
        body = request.body
        generation = getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
        codes: dict[tuple[str, int], int] = {}
        offsets = {}
        now_ms = self.broker.clock.now_ms()
        group_ok = self._allowed(session, Op.READ, R.GROUP, body.group_id)
        coordinator = self.coordinator_error() if group_ok else 0
        for topic in body.topics:
            topic_ok = self._allowed(session, Op.READ, R.TOPIC, topic.name)
            for p in topic.partitions:
                if not group_ok:
                    codes[(topic.name, p.partition_index)] = GROUP_AUTHORIZATION_FAILED
                elif coordinator:
                    codes[(topic.name, p.partition_index)] = coordinator
                elif not topic_ok:
                    codes[(topic.name, p.partition_index)] = TOPIC_AUTHORIZATION_FAILED
                else:
                    offsets[(topic.name, p.partition_index)] = CommittedOffset(
                        p.committed_offset, p.committed_metadata or "", now_ms)
        if offsets:
            try:
                await self.broker.groups.commit(body.group_id, offsets, generation_id=generation,
                                                member_id=body.member_id)
                code = 0
            except Exception as exc:  # noqa: BLE001 - the commit is all or nothing
                code = error_code(exc)
            codes.update({tp: code for tp in offsets})
        return {"throttle_time": 0, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                             "error_code": codes[(t.name, p.partition_index)]}
                                            for p in t.partitions]} for t in body.topics]}

    async def offset_fetch(self, request: Request, session: Session) -> dict:
        body = request.body
        group_ok = self._allowed(session, Op.DESCRIBE, R.GROUP, body.group_id)
        coordinator = self.coordinator_error() if group_ok else 0
        if request.api_version >= 2 and (not group_ok or coordinator):
            return {"throttle_time": 0, "topics": [], "error_code": coordinator or GROUP_AUTHORIZATION_FAILED}
        if body.topics is None:  # every partition the group committed
            by_topic: dict[str, list[int]] = {}
            for (t, p) in self.broker.groups.offsets.group_offsets(body.group_id) if not coordinator else ():
                by_topic.setdefault(t, []).append(p)
            wanted = sorted(by_topic.items())
        else:
            wanted = [(t.name, list(t.partition_indexes)) for t in body.topics]
        topics = []
        for name, partitions in wanted:
            topic_ok = self._allowed(session, Op.DESCRIBE, R.TOPIC, name)
            readable = group_ok and topic_ok and not coordinator
            found = self.broker.groups.committed(body.group_id, [(name, p) for p in partitions]) if readable else {}
            code = 0 if readable else (GROUP_AUTHORIZATION_FAILED if not group_ok else
                                       coordinator or TOPIC_AUTHORIZATION_FAILED)
            parts = []
            for p in partitions:
                c = found.get((name, p))
                parts.append({"partition_index": p, "committed_offset": c.offset if c else -1,
                              "committed_leader_epoch": -1, "metadata": c.metadata if c else "", "error_code": code})
            topics.append({"name": name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics, "error_code": 0}


# -- the consumer protocol's embedded bytes (ConsumerProtocolSubscription / Assignment) ----------

_SUBSCRIPTION_VERSIONS = 3
#: Assignor names of clients that do not use the Java client's names, as the
#: coordinator's strategy they mean (kafkajs); any other unknown name is "range".
_CLIENT_ASSIGNORS = {"RoundRobinAssigner": "roundrobin"}


def _strategy(protocol_name: str) -> str:
    """The coordinator strategy (``laketail.coordinator.assignors.ASSIGNORS``) for a
    JoinGroup protocol name: the coordinator assigns, whatever assignor the client runs
    (docs/architecture.md §9.2), so a name it does not know still joins."""
    if protocol_name in ASSIGNORS:
        return protocol_name
    return _CLIENT_ASSIGNORS.get(protocol_name, "range")


def _subscription(metadata: bytes) -> tuple[list[str], list[tuple[str, int]]]:
    """A JoinGroup protocol's metadata: the subscribed topics and owned partitions.
    A version newer than kio knows is read as the newest it knows (versions only add
    fields at the end)."""
    if len(metadata) < 2:
        raise InconsistentGroupProtocol("a consumer subscription without a version")
    (version,) = struct.unpack_from(">h", metadata)
    schema = load_entity_schema("consumer_protocol_subscription", max(0, min(version, _SUBSCRIPTION_VERSIONS)),
                                EntityType.data)
    try:
        sub: Any = entity_reader(schema)(metadata, 2)[0]
    except Exception as exc:  # noqa: BLE001 - kio raises several kinds for bad bytes
        raise InconsistentGroupProtocol(f"the consumer subscription does not parse: {exc}") from exc
    owned = [(tp.topic, p) for tp in getattr(sub, "owned_partitions", ()) or () for p in tp.partitions]
    return list(sub.topics), owned


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _encode_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    return struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics) + struct.pack(">i", -1)


def _encode_assignment(assignment: list[tuple[str, int]]) -> bytes:
    """ConsumerProtocolAssignment v0: version, (topic, partitions)*, null user data."""
    by_topic: dict[str, list[int]] = {}
    for t, p in assignment:
        by_topic.setdefault(t, []).append(p)
    out = bytearray(struct.pack(">hi", 0, len(by_topic)))
    for t, parts in sorted(by_topic.items()):
        out += _string(t) + struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in sorted(parts))
    return bytes(out + struct.pack(">i", -1))


def _empty_fetch_partition(partition: int) -> dict[str, Any]:
    """A Fetch answer's partition before anything is known of it."""
    return {"partition_index": partition, "error_code": 0, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": [], "preferred_read_replica": -1, "records": b""}
