"""One broker to Kafka clients, whichever request process a connection reached.

Role: ``laketail serve --processes N`` (:mod:`laketail.request_processes`) runs N
processes that all accept on the Kafka listener's port (``SO_REUSEPORT``, as on the
HTTP port); the kernel gives each connection to one of them. Each process is a cluster
member of its own (``broker.id + k * PROCESS_ID_STRIDE``), but a Kafka client sees one
broker: Metadata, FindCoordinator, DescribeCluster and the leader hints name the
configured ``broker.id`` at the one advertised endpoint
(:func:`~laketail.request_processes.broker_id_of`). What a client then sends reaches
any process, and is answered there, with at most one local hop:

* **Produce** to a partition a sibling leads is parsed and framed where it arrived,
  and its append handed to the leading process over the Unix-socket hand-off
  (:mod:`laketail.handoff`); a request's appends to one sibling travel in one hand-off
  (:class:`~laketail.handoff.HandoffClient` gathers those of the same event-loop turn),
  except idempotent batches, which carry their producer's sequence each and go one
  per partition. The sibling's Kafka error codes come back with each outcome.
* **Fetch** of a partition a sibling leads is read from the sibling's files (no hop)
  within the offsets it publishes, else forwarded to it over its loopback inter-broker
  listener (one hop: long polls at the high watermark, transactions' records), as the
  REST fetch does (:class:`~laketail.fetch_path.FetchPath`). ListOffsets and
  OffsetForLeaderEpoch ask the leading process the same way.
* **Coordinator requests** (groups, offsets, transactions, producer ids: the APIs of
  :data:`COORDINATOR_APIS`, and a transactional Produce, whose partitions the
  transaction coordinator checks) are answered by the process that runs the
  coordinators, the controller: a process that does not passes the request frame as
  received to it (``POST /internal/v1/kafka/{listener}`` on its inter-broker listener,
  with the client's principal and address, as the REST coordinator proxy does:
  ``api/coordinator_proxy.py``) and writes its answer back as is. A transactional
  Produce passed so may then be handed to a third process that leads the partition:
  two local hops, the one exception.

A process that cannot reach the coordinators' process closes the client's connection
(the client reconnects, asks again, and lands where the kernel puts it).
Event loop thread only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from laketail.cluster.node import INTERNAL
from laketail.errors import LaketailError
from laketail.kafka.protocol import CloseConnection, Request
from laketail.request_processes import broker_id_of, broker_ids_of
from laketail.security.peers import peer_headers

if TYPE_CHECKING:
    from laketail.broker import Broker
    from laketail.kafka.apis import Session

log = logging.getLogger(__name__)

#: Produce (0), when transactional, goes with these
PRODUCE = 0
#: The APIs the group and transaction coordinators answer: OffsetCommit, OffsetFetch,
#: JoinGroup, Heartbeat, LeaveGroup, SyncGroup, DescribeGroups, ListGroups,
#: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
#: DeleteGroups, OffsetDelete, DescribeTransactions, ListTransactions.
COORDINATOR_APIS = frozenset({8, 9, 11, 12, 13, 14, 15, 16, 22, 24, 25, 26, 28, 42, 47, 65, 66})
#: The internal route that answers a passed request (``api/routes/internal.py``)
PASS_PATH = f"{INTERNAL}/kafka"


class Siblings:
    """This process's view of the other request processes of its broker (none: one
    process, and every method answers as for a lone broker)."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.members = frozenset(broker.settings.request_process_log_dirs)
        #: the broker id clients see for this process
        self.node_id = broker_id_of(broker.broker_id)

    def is_sibling(self, member_id: int) -> bool:
        """Whether ``member_id`` is another request process of this broker."""
        return member_id != self.broker.broker_id and member_id in self.members

    def is_mine(self, member_id: int) -> bool:
        """Whether ``member_id`` is this process or a sibling: this broker to clients."""
        return member_id == self.broker.broker_id or member_id in self.members

    @staticmethod
    def outward(member_id: int) -> int:
        return broker_id_of(member_id)

    @staticmethod
    def outward_all(member_ids: list[int]) -> list[int]:
        return broker_ids_of(member_ids)

    def coordinators_elsewhere(self) -> bool:
        """Whether a sibling runs the coordinators (it is the controller)."""
        return self.is_sibling(self.broker.controller_id)

    def passes(self, request: Request) -> bool:
        """Whether ``request`` goes to the sibling that runs the coordinators."""
        if not self.members or not self.coordinators_elsewhere():
            return False
        if request.api_key in COORDINATOR_APIS:
            return True
        return request.api_key == PRODUCE and request.body.transactional_id is not None

    async def pass_on(self, request: Request, session: "Session", listener_name: str) -> bytes | None:
        """The coordinators' process's answer to ``request`` (its frame, size prefix
        included), None when it answers nothing (acks=0); CloseConnection when it could
        not be asked or did not answer."""
        self.broker.kafka_requests_passed += 1
        try:
            resp = await self.broker.cluster.call_controller_raw(
                "POST", f"{PASS_PATH}/{listener_name}", content=request.frame,
                headers={**peer_headers("", session.principal, session.host),
                         "content-type": "application/octet-stream"})
        except LaketailError as exc:
            raise CloseConnection(f"the request process running the coordinators did not answer: {exc}") from exc
        if resp.status_code == 204:
            return None
        if resp.status_code != 200:
            raise CloseConnection(f"the request process running the coordinators answered {resp.status_code}: "
                                  f"{resp.text[:200]}")
        return resp.content
