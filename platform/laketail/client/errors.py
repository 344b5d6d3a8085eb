"""The client's errors, shaped like confluent-kafka's: ``KafkaError`` and ``KafkaException``.

``KafkaError`` is a value: a code, a reason and the flags ``retriable`` / ``fatal``.
Codes are librdkafka's: Kafka's protocol codes (``UNKNOWN_TOPIC_OR_PART`` = 3, ...)
and librdkafka's negative local codes (``_PARTITION_EOF`` = -191, ``_TRANSPORT`` =
-195, ``_AUTO_OFFSET_RESET`` = -140, ...), both readable as class attributes, so
``err.code() == KafkaError._PARTITION_EOF`` reads as it does with confluent-kafka.
``KafkaException`` carries one ``KafkaError`` in ``args[0]``.

Errors the broker answers arrive as laketail's ``{"error_code", "message"}`` bodies;
the gateway connection turns them back into the broker's ``LaketailError`` with
:func:`laketail.errors.from_body` and then into a ``KafkaError`` here
(:meth:`KafkaError.from_laketail`): the code is the error's ``kafka_code``, the
reason its message, ``retriable`` its own flag. That is the client's one translation.
An error the broker's module has no class for (a newer broker's) arrives as a plain
``LaketailError``; those the client must act on are known here by their REST code
(:data:`BY_REST_CODE`: LEADER_NOT_AVAILABLE 50303 is Kafka's 5, retriable).
"""

from __future__ import annotations

import builtins

from laketail.errors import LaketailError, NoOffsetForPartition

#: librdkafka's local (negative) error codes, by name.
LOCAL_CODES: dict[str, int] = {
    "_BAD_MSG": -199, "_BAD_COMPRESSION": -198, "_DESTROY": -197, "_FAIL": -196,
    "_TRANSPORT": -195, "_CRIT_SYS_RESOURCE": -194, "_RESOLVE": -193, "_MSG_TIMED_OUT": -192,
    "_PARTITION_EOF": -191, "_UNKNOWN_PARTITION": -190, "_FS": -189, "_UNKNOWN_TOPIC": -188,
    "_ALL_BROKERS_DOWN": -187, "_INVALID_ARG": -186, "_TIMED_OUT": -185, "_QUEUE_FULL": -184,
    "_ISR_INSUFF": -183, "_NODE_UPDATE": -182, "_SSL": -181, "_WAIT_COORD": -180,
    "_UNKNOWN_GROUP": -179, "_IN_PROGRESS": -178, "_PREV_IN_PROGRESS": -177,
    "_EXISTING_SUBSCRIPTION": -176, "_ASSIGN_PARTITIONS": -175, "_REVOKE_PARTITIONS": -174,
    "_CONFLICT": -173, "_STATE": -172, "_UNKNOWN_PROTOCOL": -171, "_NOT_IMPLEMENTED": -170,
    "_AUTHENTICATION": -169, "_NO_OFFSET": -168, "_OUTDATED": -167, "_TIMED_OUT_QUEUE": -166,
    "_UNSUPPORTED_FEATURE": -165, "_WAIT_CACHE": -164, "_INTR": -163,
    "_KEY_SERIALIZATION": -162, "_VALUE_SERIALIZATION": -161, "_KEY_DESERIALIZATION": -160,
    "_VALUE_DESERIALIZATION": -159, "_PARTIAL": -158, "_READ_ONLY": -157, "_NOENT": -156,
    "_UNDERFLOW": -155, "_INVALID_TYPE": -154, "_RETRY": -153, "_PURGE_QUEUE": -152,
    "_PURGE_INFLIGHT": -151, "_FATAL": -150, "_INCONSISTENT": -149,
    "_GAPLESS_GUARANTEE": -148, "_MAX_POLL_EXCEEDED": -147, "_UNKNOWN_BROKER": -146,
    "_NOT_CONFIGURED": -145, "_FENCED": -144, "_APPLICATION": -143,
    "_ASSIGNMENT_LOST": -142, "_NOOP": -141, "_AUTO_OFFSET_RESET": -140,
    "_LOG_TRUNCATION": -139,
}

#: Kafka's protocol error codes, by librdkafka's names.
BROKER_CODES: dict[str, int] = {
    "UNKNOWN": -1, "NO_ERROR": 0, "OFFSET_OUT_OF_RANGE": 1, "INVALID_MSG": 2,
    "UNKNOWN_TOPIC_OR_PART": 3, "INVALID_MSG_SIZE": 4, "LEADER_NOT_AVAILABLE": 5,
    "NOT_LEADER_FOR_PARTITION": 6, "REQUEST_TIMED_OUT": 7, "BROKER_NOT_AVAILABLE": 8,
    "REPLICA_NOT_AVAILABLE": 9, "MSG_SIZE_TOO_LARGE": 10, "STALE_CTRL_EPOCH": 11,
    "OFFSET_METADATA_TOO_LARGE": 12, "NETWORK_EXCEPTION": 13,
    "COORDINATOR_LOAD_IN_PROGRESS": 14, "COORDINATOR_NOT_AVAILABLE": 15,
    "NOT_COORDINATOR": 16, "TOPIC_EXCEPTION": 17, "RECORD_LIST_TOO_LARGE": 18,
    "NOT_ENOUGH_REPLICAS": 19, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20,
    "INVALID_REQUIRED_ACKS": 21, "ILLEGAL_GENERATION": 22, "INCONSISTENT_GROUP_PROTOCOL": 23,
    "INVALID_GROUP_ID": 24, "UNKNOWN_MEMBER_ID": 25, "INVALID_SESSION_TIMEOUT": 26,
    "REBALANCE_IN_PROGRESS": 27, "INVALID_COMMIT_OFFSET_SIZE": 28,
    "TOPIC_AUTHORIZATION_FAILED": 29, "GROUP_AUTHORIZATION_FAILED": 30,
    "CLUSTER_AUTHORIZATION_FAILED": 31, "INVALID_TIMESTAMP": 32,
    "UNSUPPORTED_SASL_MECHANISM": 33, "ILLEGAL_SASL_STATE": 34, "UNSUPPORTED_VERSION": 35,
    "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37, "INVALID_REPLICATION_FACTOR": 38,
    "INVALID_REPLICA_ASSIGNMENT": 39, "INVALID_CONFIG": 40, "NOT_CONTROLLER": 41,
    "INVALID_REQUEST": 42, "UNSUPPORTED_FOR_MESSAGE_FORMAT": 43, "POLICY_VIOLATION": 44,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": 45, "DUPLICATE_SEQUENCE_NUMBER": 46,
    "INVALID_PRODUCER_EPOCH": 47, "INVALID_TXN_STATE": 48, "INVALID_PRODUCER_ID_MAPPING": 49,
    "INVALID_TRANSACTION_TIMEOUT": 50, "CONCURRENT_TRANSACTIONS": 51,
    "TRANSACTION_COORDINATOR_FENCED": 52, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 53,
    "SECURITY_DISABLED": 54, "OPERATION_NOT_ATTEMPTED": 55, "KAFKA_STORAGE_ERROR": 56,
    "LOG_DIR_NOT_FOUND": 57, "SASL_AUTHENTICATION_FAILED": 58, "UNKNOWN_PRODUCER_ID": 59,
    "REASSIGNMENT_IN_PROGRESS": 60, "DELEGATION_TOKEN_AUTH_DISABLED": 61,
    "DELEGATION_TOKEN_NOT_FOUND": 62, "DELEGATION_TOKEN_OWNER_MISMATCH": 63,
    "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED": 64, "DELEGATION_TOKEN_AUTHORIZATION_FAILED": 65,
    "DELEGATION_TOKEN_EXPIRED": 66, "INVALID_PRINCIPAL_TYPE": 67, "NON_EMPTY_GROUP": 68,
    "GROUP_ID_NOT_FOUND": 69, "FETCH_SESSION_ID_NOT_FOUND": 70,
    "INVALID_FETCH_SESSION_EPOCH": 71, "LISTENER_NOT_FOUND": 72, "TOPIC_DELETION_DISABLED": 73,
    "FENCED_LEADER_EPOCH": 74, "UNKNOWN_LEADER_EPOCH": 75, "UNSUPPORTED_COMPRESSION_TYPE": 76,
    "STALE_BROKER_EPOCH": 77, "OFFSET_NOT_AVAILABLE": 78, "MEMBER_ID_REQUIRED": 79,
    "PREFERRED_LEADER_NOT_AVAILABLE": 80, "GROUP_MAX_SIZE_REACHED": 81,
    "FENCED_INSTANCE_ID": 82, "ELIGIBLE_LEADERS_NOT_AVAILABLE": 83, "ELECTION_NOT_NEEDED": 84,
    "NO_REASSIGNMENT_IN_PROGRESS": 85, "GROUP_SUBSCRIBED_TO_TOPIC": 86, "INVALID_RECORD": 87,
    "UNSTABLE_OFFSET_COMMIT": 88, "THROTTLING_QUOTA_EXCEEDED": 89, "PRODUCER_FENCED": 90,
    "RESOURCE_NOT_FOUND": 91, "DUPLICATE_RESOURCE": 92, "UNACCEPTABLE_CREDENTIAL": 93,
    "INCONSISTENT_VOTER_SET": 94, "INVALID_UPDATE_VERSION": 95, "FEATURE_UPDATE_FAILED": 96,
    "PRINCIPAL_DESERIALIZATION_FAILURE": 97, "UNKNOWN_TOPIC_ID": 100,
    "FENCED_MEMBER_EPOCH": 110, "UNRELEASED_INSTANCE_ID": 111, "UNSUPPORTED_ASSIGNOR": 112,
    "TRANSACTIONAL_ID_NOT_FOUND": 105, "STALE_MEMBER_EPOCH": 113, "UNKNOWN_SUBSCRIPTION_ID": 117,
    "TELEMETRY_TOO_LARGE": 118,
    "REBOOTSTRAP_REQUIRED": 129,
}

_NAMES: dict[int, str] = {code: name for name, code in {**LOCAL_CODES, **BROKER_CODES}.items()}

#: Human descriptions librdkafka gives the local codes the client raises most.
_DESCRIPTIONS: dict[int, str] = {
    -191: "Broker: No more messages",
    -192: "Local: Message timed out",
    -195: "Local: Broker transport failure",
    -185: "Local: Timed out",
    -186: "Local: Invalid argument or configuration",
    -190: "Local: Unknown partition",
    -188: "Local: Unknown topic",
    -168: "Local: No offset stored",
    -170: "Local: Not implemented",
    -147: "Local: Maximum application poll interval (max.poll.interval.ms) exceeded",
    -140: "Local: No offset to automatically reset to",
    -172: "Local: Erroneous state",
    -152: "Local: Purged in queue",
    -151: "Local: Purged in flight",
    -150: "Local: Fatal error",
    -145: "Local: Functionality not configured",
}


#: Broker errors known by their REST ``error_code`` when :func:`laketail.errors.from_body`
#: has no class for them: rest code -> (Kafka code, retriable).
BY_REST_CODE: dict[int, tuple[int, bool]] = {
    50303: (BROKER_CODES["LEADER_NOT_AVAILABLE"], True),
}


class KafkaError:
    """An error code with its reason, as confluent-kafka's ``KafkaError``.

    Equal to another ``KafkaError`` or to an ``int`` with the same code; ``name()`` is
    librdkafka's name for the code (``UNKNOWN_TOPIC_OR_PART``, ``_PARTITION_EOF``).
    """

    def __init__(
        self,
        code: int,
        reason: str | None = None,
        fatal: bool = False,
        retriable: bool = False,
        txn_requires_abort: bool = False,
    ) -> None:
        self._code = int(code)
        self._reason = reason if reason is not None else _DESCRIPTIONS.get(self._code, self.name())
        self._fatal = bool(fatal)
        self._retriable = bool(retriable)
        self._txn_requires_abort = bool(txn_requires_abort)

    @classmethod
    def from_laketail(cls, exc: LaketailError) -> "KafkaError":
        """The broker's error as the client reports it (one translation, here)."""
        if isinstance(exc, NoOffsetForPartition):
            return cls(LOCAL_CODES["_AUTO_OFFSET_RESET"], exc.message)
        if type(exc) is LaketailError and exc.rest_code in BY_REST_CODE:
            code, retriable = BY_REST_CODE[exc.rest_code]
            return cls(code, exc.detail, retriable=retriable)  # detail: the whole message
        return cls(exc.kafka_code, exc.message, retriable=exc.retriable)

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return _NAMES.get(self._code, f"ERR_{self._code}?")

    def str(self) -> str:
        return self._reason

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable

    def txn_requires_abort(self) -> bool:
        return self._txn_requires_abort

    def __str__(self) -> builtins.str:  # ``str`` is the method above in this class
        return f'KafkaError{{code={self.name()},val={self._code},str="{self._reason}"}}'

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        if isinstance(other, int):
            return self._code == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._code)

    def __lt__(self, other: "KafkaError | int") -> bool:
        return self._code < (other._code if isinstance(other, KafkaError) else other)


for _name, _code in {**LOCAL_CODES, **BROKER_CODES}.items():
    setattr(KafkaError, _name, _code)
#: Kafka's own spelling of code 3, kept beside librdkafka's ``UNKNOWN_TOPIC_OR_PART``.
KafkaError.UNKNOWN_TOPIC_OR_PARTITION = BROKER_CODES["UNKNOWN_TOPIC_OR_PART"]  # type: ignore[attr-defined]


class KafkaException(Exception):
    """Raised by the client; ``args[0]`` is the :class:`KafkaError`."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        if not args and "error" in kwargs:
            args = (kwargs.pop("error"),)
        super().__init__(*args)

    @property
    def error(self) -> KafkaError | None:
        first = self.args[0] if self.args else None
        return first if isinstance(first, KafkaError) else None

    def __str__(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


def local_error(name: str, reason: str | None = None, *, retriable: bool = False) -> KafkaError:
    """A librdkafka local error by name (``"_TRANSPORT"``, ``"_MSG_TIMED_OUT"``, ...)."""
    return KafkaError(LOCAL_CODES[name], reason, retriable=retriable)


def raise_local(name: str, reason: str | None = None) -> None:
    raise KafkaException(local_error(name, reason))
