"""The producer's idempotence and transactions: producer id, sequences, transaction state.

Role: what Kafka's Java client keeps in its ``TransactionManager`` and librdkafka in
its idempotence and transaction managers, for one producer.

Idempotence (``enable.idempotence``). The producer has a *producer id* and *epoch*
from ``POST /v1/producers`` (fetched by the sender before its first batch, or by
``init_transactions()``). Every batch is *stamped* once, when it is first sent, with
the id, the epoch and its partition's next *sequence* (then advanced by the batch's
record count); a retry sends the same stamp, so the broker answers a batch it already
appended with the original offsets instead of appending it again. A batch that fails
for good changes what the next sequence must be:

* refused by the broker (it answered, nothing was appended): the partition's sequence
  goes back to the batch's, as if it had never been stamped;
* without an answer at its last attempt (``maybe_written``): the broker's sequence is
  unknown, so the producer needs a new identity before it stamps again -- a new
  producer id for an idempotent producer, an epoch bump (``init`` again) for a
  transactional one, once its transaction is aborted (Kafka's KIP-360);
* OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED: fatal for an
  idempotent producer, as in librdkafka.

Transactions (``transactional.id``). States, as librdkafka's::

    UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> COMMITTING --> READY
    IN_TRANSACTION | ABORTABLE_ERROR --abort_transaction--> ABORTING --> READY
    any --fencing or another fatal error--> FATAL_ERROR (the producer is unusable)

Errors come back as ``KafkaException`` whose ``KafkaError`` keeps Kafka's name and
librdkafka's flags: ``retriable()`` (call the same method again: timeouts, a gateway
that does not answer), ``txn_requires_abort()`` (the transaction failed:
``abort_transaction()`` and start again; a failed delivery inside a transaction,
OUT_OF_ORDER_SEQUENCE_NUMBER, a consumer group error on the offsets, ...) and
``fatal()`` (PRODUCER_FENCED -- a newer session of the same ``transactional.id``
exists -- and any error of ``init_transactions()`` that is not retriable).
librdkafka reports fencing with its local code ``_FENCED``; laketail keeps Kafka's
``PRODUCER_FENCED`` (INVALID_PRODUCER_EPOCH is the same event seen by a partition).
CONCURRENT_TRANSACTIONS is retried within the call's timeout.

Thread-safety: the sender's threads call the ``batch`` methods, the application's
thread the transaction methods; one lock guards the state. HTTP calls run without it.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Any, Callable
from urllib.parse import quote

from laketail.client.accumulator import ProducerBatch
from laketail.client.config import ProducerConfig
from laketail.client.errors import KafkaError, KafkaException, local_error
from laketail.client.gateway import Gateway

TP = tuple[str, int]

PRODUCER_FENCED = KafkaError.PRODUCER_FENCED  # type: ignore[attr-defined]
INVALID_PRODUCER_EPOCH = KafkaError.INVALID_PRODUCER_EPOCH  # type: ignore[attr-defined]
OUT_OF_ORDER = KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER  # type: ignore[attr-defined]
CONCURRENT_TRANSACTIONS = KafkaError.CONCURRENT_TRANSACTIONS  # type: ignore[attr-defined]
#: The broker no longer knows the producer id: a new identity is needed.
UNKNOWN_PRODUCER = frozenset({KafkaError.INVALID_PRODUCER_ID_MAPPING, KafkaError.UNKNOWN_PRODUCER_ID})  # type: ignore
#: Errors after which a produce request may or may not have been appended.
AMBIGUOUS = frozenset({
    KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError.UNKNOWN,  # type: ignore[attr-defined]
    KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,  # type: ignore[attr-defined]
})
#: How long to wait between attempts of a transactional request that may be retried.
RETRY_BACKOFF_S = 0.05
SEQUENCE_LIMIT = 2**31  # sequences are int32 and wrap to 0, as Kafka's do


class TxnState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "CommittingTransaction"
    ABORTING = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


def _flagged(err: KafkaError, *, fatal: bool = False, abortable: bool = False,
             retriable: bool | None = None) -> KafkaError:
    return KafkaError(err.code(), err.str(), fatal=fatal, txn_requires_abort=abortable,
                      retriable=err.retriable() if retriable is None else retriable)


def _fenced(err: KafkaError) -> KafkaError:
    """PRODUCER_FENCED, fatal (INVALID_PRODUCER_EPOCH normalised to it, as librdkafka
    normalises both)."""
    return KafkaError(PRODUCER_FENCED, err.str(), fatal=True)


class Deadline:
    """A call's timeout: seconds, None or negative meaning forever."""

    def __init__(self, timeout: float | None) -> None:
        self.at = None if timeout is None or timeout < 0 else time.monotonic() + float(timeout)

    def left(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    @property
    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at


class TransactionManager:
    """Producer id, epoch and sequences of one producer, and its transaction state."""

    def __init__(self, config: ProducerConfig, gateway: Gateway,
                 on_fatal: Callable[[KafkaError], None] | None = None) -> None:
        self.idempotent = config.enable_idempotence
        self.transactional_id = config.transactional_id
        self.timeout_ms = config.transaction_timeout_ms
        self.request_timeout_s = config.socket_timeout_ms / 1000.0
        self.backoff_s = config.retry_backoff_ms / 1000.0
        self.gateway = gateway
        self.on_fatal = on_fatal
        self._lock = threading.Lock()
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_seq: dict[TP, int] = {}
        self._stale = False  # the broker's sequences are unknown: a new identity first
        self._pid_retry_at = 0.0
        self.state = TxnState.UNINITIALIZED
        self._error: KafkaError | None = None  # the abortable or fatal error of the state
        self.aborting = False  # the sender neither retries nor stamps while set

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    # -- identity (sender thread for an idempotent producer) ---------------------------------------

    def ready(self, now: float) -> bool:
        """Whether batches may be stamped now; an idempotent producer without an identity
        asks for one here (the sender's thread), at most once per ``retry.backoff.ms``."""
        if not self.idempotent or self.transactional or self.state is TxnState.FATAL_ERROR:
            return True
        with self._lock:
            if self.producer_id >= 0 and not self._stale:
                return True
        if now < self._pid_retry_at:
            return False
        try:
            pid, epoch = self._init_producer_id(None, self.request_timeout_s)
        except KafkaException:
            self._pid_retry_at = now + self.backoff_s
            return False
        with self._lock:
            self._set_identity(pid, epoch)
        return True

    def retry_at(self) -> float:
        return self._pid_retry_at

    def _init_producer_id(
        self, transactional_id: str | None, timeout_s: float | None, bump: bool = False
    ) -> tuple[int, int]:
        body = {"transactional_id": transactional_id, "transaction_timeout_ms": self.timeout_ms}
        if bump and self.producer_id >= 0:
            # Bump only our own session: the coordinator fences us if another took over.
            body["producer_id"], body["producer_epoch"] = self.producer_id, self.producer_epoch
        answer = self.gateway.post_json("/v1/producers", body, timeout_s=timeout_s)
        return int(answer["producer_id"]), int(answer["producer_epoch"])

    def _set_identity(self, pid: int, epoch: int) -> None:
        self.producer_id, self.producer_epoch = pid, epoch
        self._next_seq = {}
        self._stale = False

    # -- batches (sender threads) -------------------------------------------------------------------

    def stamp(self, batch: ProducerBatch) -> KafkaError | None:
        """Give a batch sent for the first time its producer id, epoch and sequence; an
        error instead when it must not be sent (the producer is failed)."""
        if not self.idempotent or batch.stamped:
            return None
        with self._lock:
            if self.state is TxnState.FATAL_ERROR:
                return local_error("_FATAL", f"Fatal error: {self._error.str() if self._error else ''}")
            if self.transactional and (self._stale or self.aborting):
                return self._error or local_error("_PURGE_QUEUE", "the transaction is being aborted")
            tp = (batch.topic, batch.partition)
            seq = self._next_seq.get(tp, 0)
            self._next_seq[tp] = (seq + len(batch.records)) % SEQUENCE_LIMIT
            batch.producer_id, batch.producer_epoch, batch.base_sequence = self.producer_id, self.producer_epoch, seq
            batch.transactional = self.transactional
        return None

    @staticmethod
    def params(batch: ProducerBatch) -> dict[str, Any]:
        """The produce request's producer parameters (none for an unstamped batch)."""
        if not batch.stamped:
            return {}
        return {"producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
                "sequence": batch.base_sequence, "transactional": "true" if batch.transactional else "false"}

    def attempt_failed(self, batch: ProducerBatch, err: KafkaError) -> bool:
        """Note an attempt's failure; whether the sender may retry the batch (a retry
        keeps its stamp, so the broker answers a duplicate with its first offsets)."""
        if err.code() in AMBIGUOUS:
            batch.maybe_written = True
        return not self.aborting and self.state is not TxnState.FATAL_ERROR

    def batch_failed(self, batch: ProducerBatch, err: KafkaError, *, purged: bool = False) -> KafkaError:
        """A batch failed for good: update the sequences and the state; return the
        error its records report."""
        code = err.code()
        if not self.idempotent:
            return err
        if code in (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH):
            self._set_fatal(_fenced(err) if self.transactional else _flagged(err, fatal=True))
            return _flagged(err, fatal=True)
        if code == OUT_OF_ORDER and not self.transactional:
            self._set_fatal(_flagged(err, fatal=True))
            return _flagged(err, fatal=True)
        with self._lock:
            if code == OUT_OF_ORDER or code in UNKNOWN_PRODUCER:
                self._stale = True
            elif batch.stamped and batch.producer_id == self.producer_id and \
                    batch.producer_epoch == self.producer_epoch:
                tp = (batch.topic, batch.partition)
                following = (batch.base_sequence + len(batch.records)) % SEQUENCE_LIMIT
                if not batch.maybe_written and self._next_seq.get(tp) == following:
                    self._next_seq[tp] = batch.base_sequence  # refused: as if never stamped
                else:
                    self._stale = True
            if self.transactional and not purged and not self.aborting:
                self._abortable(err)
        return err

    def _abortable(self, err: KafkaError) -> None:
        """The transaction cannot commit any more (caller holds the lock)."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self.state = TxnState.ABORTABLE_ERROR
            self._error = _flagged(err, abortable=True, retriable=False)

    def _set_fatal(self, err: KafkaError) -> None:
        with self._lock:
            if self.state is TxnState.FATAL_ERROR:
                return
            self.state = TxnState.FATAL_ERROR
            self._error = err
        if self.on_fatal is not None:
            self.on_fatal(err)

    # -- the application's checks -------------------------------------------------------------------

    def check_produce(self) -> None:
        """Raise unless ``produce()`` may queue a record now."""
        state = self.state
        if state is TxnState.FATAL_ERROR:
            reason = self._error.str() if self._error else ""
            raise KafkaException(KafkaError(KafkaError._FATAL, f"Fatal error: {reason}", fatal=True))  # type: ignore
        if not self.transactional or state is TxnState.IN_TRANSACTION:
            return
        if state is TxnState.ABORTABLE_ERROR and self._error is not None:
            raise KafkaException(self._error)
        raise KafkaException(local_error(
            "_STATE", f"Transactional producer is not in a transaction (state {state.value}): "
            "call begin_transaction() first"))

    def require_transaction(self, api: str) -> None:
        """Raise unless a transaction is open (for calls that then have nothing to send)."""
        self._require(TxnState.IN_TRANSACTION, api=api)

    def _require(self, *states: TxnState, api: str) -> TxnState:
        if not self.transactional:
            raise KafkaException(KafkaError(
                KafkaError._NOT_CONFIGURED,  # type: ignore[attr-defined]
                "The Transactional API requires transactional.id to be configured"))
        with self._lock:
            state = self.state
            if state is TxnState.FATAL_ERROR:
                raise KafkaException(self._error)
            if state not in states:
                if state is TxnState.ABORTABLE_ERROR and self._error is not None:
                    raise KafkaException(self._error)
                raise KafkaException(local_error("_STATE", f"{api}: Operation not valid in state {state.value}"))
            return state

    # -- transactions (application thread) --------------------------------------------------------------

    def init_transactions(self, timeout: float | None) -> None:
        self._require(TxnState.UNINITIALIZED, api="init_transactions")
        deadline = Deadline(timeout)
        pid, epoch = self._call(lambda t: self._init_producer_id(self.transactional_id, t), deadline,
                                fatal_unless_retriable=True)
        with self._lock:
            self._set_identity(pid, epoch)
            self.state = TxnState.READY

    def begin_transaction(self) -> None:
        self._require(TxnState.READY, api="begin_transaction")
        with self._lock:
            self.state = TxnState.IN_TRANSACTION
            self._error = None

    def send_offsets(self, offsets: list[dict[str, Any]], group_id: str, generation_id: int, member_id: str,
                     timeout: float | None) -> None:
        self._require(TxnState.IN_TRANSACTION, api="send_offsets_to_transaction")
        body = {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch, "group_id": group_id,
                "generation_id": generation_id, "member_id": member_id, "offsets": offsets}
        self._call(lambda t: self.gateway.post_json(self._path("offsets"), body, timeout_s=t),
                   Deadline(timeout), abortable=True)

    def begin_commit(self) -> None:
        """commit_transaction() starts (or resumes after a retriable error)."""
        self._require(TxnState.IN_TRANSACTION, TxnState.COMMITTING, api="commit_transaction")
        with self._lock:
            self.state = TxnState.COMMITTING

    def begin_abort(self) -> None:
        """abort_transaction() starts (or resumes): the sender stops retrying and stamping."""
        self._require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING,
                      TxnState.COMMITTING, api="abort_transaction")
        with self._lock:
            self.state = TxnState.ABORTING
            self.aborting = True

    def end(self, commit: bool, timeout: float | None) -> None:
        """End the transaction at the coordinator (the producer has flushed or purged);
        after an abort that left the sequences unknown, bump the epoch."""
        deadline = Deadline(timeout)
        with self._lock:
            if commit and self.state is not TxnState.COMMITTING:
                if self.state is TxnState.ABORTABLE_ERROR and self._error is not None:
                    raise KafkaException(self._error)
                raise KafkaException(self._error or local_error("_STATE", "the transaction is not committing"))
        body = {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch}
        path = self._path("commit" if commit else "abort")
        answer = self._call(lambda t: self.gateway.post_json(path, body, timeout_s=t), deadline,
                            abortable=commit) or {}
        if commit and answer.get("state") == "CompleteAbort":
            with self._lock:
                self._abortable(KafkaError(
                    KafkaError.INVALID_TXN_STATE,  # type: ignore[attr-defined]
                    "the coordinator aborted the transaction"))
                raise KafkaException(self._error)
        if not commit and self._stale:
            pid, epoch = self._call(lambda t: self._init_producer_id(self.transactional_id, t, bump=True), deadline)
            with self._lock:
                self._set_identity(pid, epoch)
        with self._lock:
            self.state = TxnState.READY
            self.aborting = False
            self._error = None

    def _path(self, action: str) -> str:
        return f"/v1/transactions/{quote(self.transactional_id or '', safe='')}/{action}"

    def _call(self, request: Callable[[float | None], Any], deadline: Deadline, *, abortable: bool = False,
              fatal_unless_retriable: bool = False) -> Any:
        """One transactional request, retried within the deadline while the error is
        retriable (CONCURRENT_TRANSACTIONS included); other errors classified."""
        while True:
            left = deadline.left()
            timeout_s = self.request_timeout_s if left is None else max(0.001, min(left, self.request_timeout_s))
            try:
                return request(timeout_s)
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
            code = err.code()
            if code in (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH):
                self._set_fatal(_fenced(err))
                raise KafkaException(self._error) from None
            if err.retriable() or code == CONCURRENT_TRANSACTIONS:
                if deadline.passed:
                    raise KafkaException(_flagged(err, retriable=True)) from None
                time.sleep(RETRY_BACKOFF_S if left is None else min(RETRY_BACKOFF_S, left))
                continue
            if fatal_unless_retriable:
                self._set_fatal(_flagged(err, fatal=True))
                raise KafkaException(self._error) from None
            if abortable:
                with self._lock:
                    self._abortable(err)
                    if code in UNKNOWN_PRODUCER:
                        self._stale = True
                    raise KafkaException(self._error or _flagged(err, abortable=True)) from None
            raise KafkaException(err) from None
