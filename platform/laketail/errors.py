"""laketail's errors: one root, named and numbered after Kafka's.

Every error the broker can answer is a subclass of :class:`LaketailError`. Each
class carries

* ``kafka_code`` -- the Kafka protocol error code (``OFFSET_OUT_OF_RANGE`` = 1, ...),
* ``kafka_name`` -- the Kafka protocol error name, which starts every message,
* ``http_status`` and ``rest_code`` -- the Confluent REST Proxy style status and
  ``error_code`` (HTTP status * 100 + a sub-code: 40401 topic not found, ...),
* ``retriable`` -- whether a client may retry the same request unchanged.

The gateway turns any ``LaketailError`` into ``{"error_code", "message"}`` in one
exception handler; the Python client turns that body back into the same class with
:func:`from_body` (which finds the class by its Kafka name with :func:`for_kafka_name`),
so both sides raise the same thing.

Tree (docs/rest-api.md's "Error codes" section is the full table, generated from these
classes by :func:`code_table` and kept equal to it by ``tests/test_conformance.py``)::

    LaketailError                    500 50001
    ├── UnknownTopicOrPartition      404 40401 / 40402 (v3: 404)
    ├── TopicAlreadyExists, InvalidTopic, InvalidPartitions, InvalidReplicationFactor,
    │   InvalidConfig, InvalidRequest      400 40002 (Confluent's Kafka bad request)
    │   └── InvalidRequestBody       422 42200  (JSON that does not map onto the request)
    ├── InvalidRecord                422 42206  (Confluent's payload error: bad base64, ...)
    ├── InvalidTimestamp             422 42214  (outside [0, 9999-12-31], see bounds.py)
    ├── RecordTooLarge               413 41301
    ├── OffsetOutOfRange             416 41601
    ├── NotAcceptable                406 40601
    ├── RecordDeserializationError   422 42203 (a record the consumer's format cannot decode)
    ├── SaslAuthenticationFailed     401 40101 (missing or wrong credentials)
    ├── NotLeaderOrFollower          421 42101
    ├── NotEnoughReplicas            503 50301, NotEnoughReplicasAfterAppend 50302
    ├── replication: LeaderNotAvailable 503 50303, NotController 503 50304,
    │   NotCoordinator 503 50305 (a stopping broker's pending group joins, a
    │   deposed controller's coordinators), CoordinatorLoadInProgress 503 50306,
    │   FencedLeaderEpoch 409 40920, BrokerNotAvailable 404 40408
    ├── RequestTimedOut              504 50401
    ├── CorruptMessage               500 50002
    ├── KafkaStorageError            500 50002
    │   └── HotTierFull              503 50307 (untiered bytes over local.retention.bytes)
    ├── UnknownCluster               404 404 (INCONSISTENT_CLUSTER_ID)
    ├── producers: OutOfOrderSequenceNumber 409 40910, InvalidProducerEpoch 40911,
    │   InvalidTxnState 40912, InvalidProducerIdMapping 40913, ConcurrentTransactions
    │   40914, ProducerFenced 40915, TransactionalIdNotFound 404 40407
    ├── UnsupportedMediaType         415 41501
    ├── consumer groups: IllegalGeneration 409 40904, RebalanceInProgress 409 40905,
        UnknownMemberId 404 40405, GroupIdNotFound 404 40406 (v3: 404), NonEmptyGroup
        409 40906, GroupSubscribedToTopic 409 40921, NoOffsetForPartition 409 40907, InvalidGroupId 422 42210,
        InvalidSessionTimeout 422 42211, InconsistentGroupProtocol 422 42212,
        OffsetMetadataTooLarge 422 42213
    └── authorization, 403 40301: TopicAuthorizationFailed, GroupAuthorizationFailed,
        ClusterAuthorizationFailed, TransactionalIdAuthorizationFailed
"""

from __future__ import annotations

from typing import ClassVar


class LaketailError(Exception):
    """Root of every error laketail raises on purpose."""

    kafka_code: ClassVar[int] = -1
    kafka_name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    #: Not ClassVars: an instance may override both (a 40402 partition answer, a
    #: routing error's status).
    http_status: int = 500
    rest_code: int = 50001
    #: The ``error_code`` on ``/v3`` paths when it differs (Confluent's v3 answers a
    #: missing resource with ``error_code`` 404, v2 with 40401 / 40402).
    v3_rest_code: ClassVar[int | None] = None
    retriable: ClassVar[bool] = False

    def __init__(self, detail: str = "", *, rest_code: int | None = None) -> None:
        self.detail = detail
        if rest_code is not None:
            self.rest_code = rest_code  # instance override, e.g. 40402 vs 40401
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return f"{self.kafka_name}: {self.detail}" if self.detail else self.kafka_name

    def to_body(self, v3: bool = False) -> dict:
        """The REST body; ``v3`` for an answer on a ``/v3`` path."""
        code = self.v3_rest_code if v3 and self.v3_rest_code is not None else self.rest_code
        return {"error_code": code, "message": self.message}


class UnknownTopicOrPartition(LaketailError):
    kafka_code = 3
    kafka_name = "UNKNOWN_TOPIC_OR_PARTITION"
    http_status = 404
    rest_code = 40401
    v3_rest_code = 404

    @classmethod
    def topic(cls, topic: str) -> "UnknownTopicOrPartition":
        return cls(f"topic '{topic}' does not exist", rest_code=40401)

    @classmethod
    def partition(cls, topic: str, partition: int) -> "UnknownTopicOrPartition":
        return cls(f"partition {partition} of topic '{topic}' does not exist", rest_code=40402)


class TopicAlreadyExists(LaketailError):
    kafka_code = 36
    kafka_name = "TOPIC_ALREADY_EXISTS"
    http_status = 400
    rest_code = 40002


class InvalidTopic(LaketailError):
    kafka_code = 17
    kafka_name = "INVALID_TOPIC_EXCEPTION"
    http_status = 400
    rest_code = 40002


class InvalidPartitions(LaketailError):
    kafka_code = 37
    kafka_name = "INVALID_PARTITIONS"
    http_status = 400
    rest_code = 40002


class InvalidReplicationFactor(LaketailError):
    kafka_code = 38
    kafka_name = "INVALID_REPLICATION_FACTOR"
    http_status = 400
    rest_code = 40002


class InvalidConfig(LaketailError):
    kafka_code = 40
    kafka_name = "INVALID_CONFIG"
    http_status = 400
    rest_code = 40002


class InvalidRequest(LaketailError):
    kafka_code = 42
    kafka_name = "INVALID_REQUEST"
    http_status = 400
    rest_code = 40002


class InvalidRequestBody(InvalidRequest):
    """A JSON body that parses but does not map onto the request: an unknown field, a
    field of the wrong type, an empty or missing list. Confluent's proxy answers these
    422 (Jackson's mapping errors and bean validation in rest-utils), and so do the
    peer suite's assertions (``{"records": []}``, ``{"foo": "bar"}``, ``topics`` as a
    string)."""

    http_status = 422
    rest_code = 42200


class InvalidRecord(LaketailError):
    kafka_code = 87
    kafka_name = "INVALID_RECORD"
    http_status = 422
    rest_code = 42206


class InvalidTimestamp(LaketailError):
    kafka_code = 32
    kafka_name = "INVALID_TIMESTAMP"
    http_status = 422
    rest_code = 42214


class RecordTooLarge(LaketailError):
    kafka_code = 10
    kafka_name = "MESSAGE_TOO_LARGE"
    http_status = 413
    rest_code = 41301


class OffsetOutOfRange(LaketailError):
    kafka_code = 1
    kafka_name = "OFFSET_OUT_OF_RANGE"
    http_status = 416
    rest_code = 41601


class NotAcceptable(LaketailError):
    kafka_code = 42
    kafka_name = "INVALID_REQUEST"
    http_status = 406
    rest_code = 40601


class RecordDeserializationError(LaketailError):
    """A fetched record the consumer's embedded format cannot decode (Kafka's client
    ``RecordDeserializationException``, which carries topic, partition and offset; no
    protocol code). 422 as Karapace answers it; Confluent's proxy maps Kafka's
    SerializationException to 408/40801, a retry code a client would loop on. The
    consumer stays on the record until it is sought past."""

    kafka_name = "RECORD_DESERIALIZATION_ERROR"
    http_status = 422
    rest_code = 42203  # Confluent's JSON_CONVERSION_ERROR_CODE

    def __init__(self, detail: str = "", *, rest_code: int | None = None, topic: str = "",
                 partition: int = -1, offset: int = -1, field: str = "") -> None:
        self.topic, self.partition, self.offset, self.field = topic, partition, offset, field
        super().__init__(detail, rest_code=rest_code)


class SaslAuthenticationFailed(LaketailError):
    """Credentials missing on a listener that requires them, or wrong (unknown user,
    bad password, invalid or expired token, an unauthenticated inter-broker peer).
    Confluent's REST Proxy answers 401 / 40101."""

    kafka_code = 58
    kafka_name = "SASL_AUTHENTICATION_FAILED"
    http_status = 401
    rest_code = 40101


class NotLeaderOrFollower(LaketailError):
    kafka_code = 6
    kafka_name = "NOT_LEADER_OR_FOLLOWER"
    http_status = 421
    rest_code = 42101
    retriable = True


class LeaderNotAvailable(LaketailError):
    """The partition has no live leader right now (offline, or an election is under way)."""

    kafka_code = 5
    kafka_name = "LEADER_NOT_AVAILABLE"
    http_status = 503
    rest_code = 50303
    retriable = True


class BrokerNotAvailable(LaketailError):
    kafka_code = 8
    kafka_name = "BROKER_NOT_AVAILABLE"
    http_status = 404
    rest_code = 40408


class FencedLeaderEpoch(LaketailError):
    """A request carried a leader epoch older than the partition's: its sender's view
    of who leads is stale."""

    kafka_code = 74
    kafka_name = "FENCED_LEADER_EPOCH"
    http_status = 409
    rest_code = 40920
    retriable = True


class NotController(LaketailError):
    kafka_code = 41
    kafka_name = "NOT_CONTROLLER"
    http_status = 503
    rest_code = 50304
    retriable = True


class NotCoordinator(LaketailError):
    """This broker no longer coordinates the group (it is shutting down): find the
    coordinator again and rejoin, as Kafka's clients do."""

    kafka_code = 16
    kafka_name = "NOT_COORDINATOR"
    http_status = 503
    rest_code = 50305
    retriable = True


class CoordinatorLoadInProgress(LaketailError):
    """The coordinators here are still loading their internal partitions to the high
    watermark (a broker that just became the controller): retry shortly, as Kafka's
    clients do."""

    kafka_code = 14
    kafka_name = "COORDINATOR_LOAD_IN_PROGRESS"
    http_status = 503
    rest_code = 50306
    retriable = True


class NotEnoughReplicas(LaketailError):
    kafka_code = 19
    kafka_name = "NOT_ENOUGH_REPLICAS"
    http_status = 503
    rest_code = 50301
    retriable = True


class NotEnoughReplicasAfterAppend(LaketailError):
    kafka_code = 20
    kafka_name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    http_status = 503
    rest_code = 50302
    retriable = True


class RequestTimedOut(LaketailError):
    kafka_code = 7
    kafka_name = "REQUEST_TIMED_OUT"
    http_status = 504
    rest_code = 50401
    retriable = True


class CorruptMessage(LaketailError):
    kafka_code = 2
    kafka_name = "CORRUPT_MESSAGE"
    http_status = 500
    rest_code = 50002
    retriable = True


class KafkaStorageError(LaketailError):
    kafka_code = 56
    kafka_name = "KAFKA_STORAGE_ERROR"
    http_status = 500
    rest_code = 50002
    retriable = True


class HotTierFull(KafkaStorageError):
    """A partition's hot log holds more bytes not yet tiered than ``local.retention.bytes``
    allows (its object store down or behind), so the leader takes no more until tiering
    catches up. Kafka's KAFKA_STORAGE_ERROR, retriable, which Redpanda also answers a
    produce with when its disk is nearly full; on REST 503, Service Unavailable: the
    broker is well and the request may be sent again unchanged, not a server fault (500).
    Nothing of a refused batch is written (docs/architecture.md, section 7)."""

    http_status = 503
    rest_code = 50307


def code_table() -> list[tuple[str, str, int, str]]:
    """Every error class of laketail (defined in any of its modules) as ``(kafka_name,
    class name, http_status, rest codes)``, sorted by status and code: the
    "Error codes" table of docs/rest-api.md is this list."""
    # every module that defines an error class is loaded, so the table is whole
    import laketail.api.app  # noqa: F401
    import laketail.maintenance.table_commit  # noqa: F401
    import laketail.spark.gateway  # noqa: F401

    rows = []
    classes: list[type[LaketailError]] = [LaketailError, *_all_subclasses(LaketailError)]
    for cls in classes:
        if not cls.__module__.startswith("laketail.") or cls.__name__.startswith("_"):
            continue  # the gateway's routing errors are in docs/rest-api.md's note
        codes = str(cls.rest_code)
        if cls is UnknownTopicOrPartition:
            codes = "40401 (topic), 40402 (partition)"
        if cls.v3_rest_code is not None:
            codes += f"; {cls.v3_rest_code} on /v3"
        rows.append((cls.kafka_name, cls.__name__, cls.http_status, codes))
    return sorted(rows, key=lambda r: (r[2], r[3], r[1]))


def code_table_markdown() -> str:
    """:func:`code_table` as docs/rest-api.md's Markdown table."""
    lines = ["| Kafka error (message prefix) | class | HTTP status | `error_code` |",
             "|---|---|---|---|"]
    for name, cls_name, status, codes in code_table():
        lines.append(f"| `{name}` | `{cls_name}` | {status} | {codes} |")
    return "\n".join(lines)


def _all_subclasses(cls: type[LaketailError]) -> list[type[LaketailError]]:
    out: list[type[LaketailError]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


def for_kafka_name(name: str) -> type[LaketailError]:
    """The class whose ``kafka_name`` is ``name`` (``LaketailError`` when unknown)."""
    for cls in _all_subclasses(LaketailError):
        if cls.kafka_name == name:
            return cls
    return LaketailError


def from_body(status: int, body: dict) -> LaketailError:
    """Rebuild the error a broker answered with from its REST error body."""
    message = str(body.get("message", ""))
    name, _, detail = message.partition(": ")
    cls = for_kafka_name(name)
    if cls is LaketailError:
        detail = message
    rest_code = int(body.get("error_code", status * 100))
    if cls.rest_code != rest_code:  # a subclass answering the same Kafka name with a code of its own
        cls = next((sub for sub in _all_subclasses(cls) if sub.kafka_name == name and sub.rest_code == rest_code),
                   cls)
    return cls(detail, rest_code=rest_code)


class UnknownCluster(LaketailError):
    """A v3 path names a cluster id this broker does not belong to."""

    kafka_code = 104
    kafka_name = "INCONSISTENT_CLUSTER_ID"
    http_status = 404
    rest_code = 404


class UnsupportedMediaType(LaketailError):
    """The request body's content type names an embedded format laketail cannot decode."""

    kafka_code = 42
    kafka_name = "INVALID_REQUEST"
    http_status = 415
    rest_code = 41501



# -- idempotent and transactional producers ----------------------------------------------------


class OutOfOrderSequenceNumber(LaketailError):
    kafka_code = 45
    kafka_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    http_status = 409
    rest_code = 40910


class InvalidProducerEpoch(LaketailError):
    kafka_code = 47
    kafka_name = "INVALID_PRODUCER_EPOCH"
    http_status = 409
    rest_code = 40911


class InvalidTxnState(LaketailError):
    kafka_code = 48
    kafka_name = "INVALID_TXN_STATE"
    http_status = 409
    rest_code = 40912


class InvalidProducerIdMapping(LaketailError):
    kafka_code = 49
    kafka_name = "INVALID_PRODUCER_ID_MAPPING"
    http_status = 409
    rest_code = 40913


class ConcurrentTransactions(LaketailError):
    kafka_code = 51
    kafka_name = "CONCURRENT_TRANSACTIONS"
    http_status = 409
    rest_code = 40914
    retriable = True


class ProducerFenced(LaketailError):
    kafka_code = 90
    kafka_name = "PRODUCER_FENCED"
    http_status = 409
    rest_code = 40915


class TransactionalIdNotFound(LaketailError):
    kafka_code = 105
    kafka_name = "TRANSACTIONAL_ID_NOT_FOUND"
    http_status = 404
    rest_code = 40407


# -- consumer groups (Kafka's group coordinator errors) --------------------------------------


class IllegalGeneration(LaketailError):
    kafka_code = 22
    kafka_name = "ILLEGAL_GENERATION"
    http_status = 409
    rest_code = 40904


class InvalidGroupId(LaketailError):
    kafka_code = 24
    kafka_name = "INVALID_GROUP_ID"
    http_status = 422
    rest_code = 42210


class UnknownMemberId(LaketailError):
    kafka_code = 25
    kafka_name = "UNKNOWN_MEMBER_ID"
    http_status = 404
    rest_code = 40405


class InvalidSessionTimeout(LaketailError):
    kafka_code = 26
    kafka_name = "INVALID_SESSION_TIMEOUT"
    http_status = 422
    rest_code = 42211


class RebalanceInProgress(LaketailError):
    kafka_code = 27
    kafka_name = "REBALANCE_IN_PROGRESS"
    http_status = 409
    rest_code = 40905
    retriable = True


class GroupIdNotFound(LaketailError):
    kafka_code = 69
    kafka_name = "GROUP_ID_NOT_FOUND"
    http_status = 404
    rest_code = 40406
    v3_rest_code = 404


class NonEmptyGroup(LaketailError):
    kafka_code = 68
    kafka_name = "NON_EMPTY_GROUP"
    http_status = 409
    rest_code = 40906


class GroupSubscribedToTopic(LaketailError):
    """OffsetDelete on a topic a member of the group is subscribed to."""

    kafka_code = 86
    kafka_name = "GROUP_SUBSCRIBED_TO_TOPIC"
    http_status = 409
    rest_code = 40921


class InconsistentGroupProtocol(LaketailError):
    kafka_code = 23
    kafka_name = "INCONSISTENT_GROUP_PROTOCOL"
    http_status = 422
    rest_code = 42212


class NoOffsetForPartition(LaketailError):
    """auto.offset.reset=none and the group has no committed offset (a client-side
    error in Kafka's consumer, raised here by the broker-side consumer instances)."""

    kafka_code = 1
    kafka_name = "NO_OFFSET_FOR_PARTITION"
    http_status = 409
    rest_code = 40907


class OffsetMetadataTooLarge(LaketailError):
    kafka_code = 12
    kafka_name = "OFFSET_METADATA_TOO_LARGE"
    http_status = 422
    rest_code = 42213


# -- authorization (Kafka's ACLs; Confluent answers every one with 403 40301) ------------------


class TopicAuthorizationFailed(LaketailError):
    kafka_code = 29
    kafka_name = "TOPIC_AUTHORIZATION_FAILED"
    http_status = 403
    rest_code = 40301


class GroupAuthorizationFailed(LaketailError):
    kafka_code = 30
    kafka_name = "GROUP_AUTHORIZATION_FAILED"
    http_status = 403
    rest_code = 40301


class ClusterAuthorizationFailed(LaketailError):
    kafka_code = 31
    kafka_name = "CLUSTER_AUTHORIZATION_FAILED"
    http_status = 403
    rest_code = 40301


class TransactionalIdAuthorizationFailed(LaketailError):
    kafka_code = 53
    kafka_name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    http_status = 403
    rest_code = 40301


class SecurityDisabled(LaketailError):
    """An ACL request to a broker whose ``authorizer.class.name`` is empty."""

    kafka_code = 54
    kafka_name = "SECURITY_DISABLED"
    http_status = 400
    rest_code = 40002
