"""Every broker's side of replication: leading and following partitions.

Leading (Kafka's ``Partition`` on the leader):

* each follower's fetch offset is its log end offset; a follower is *caught up* when
  it fetched from the leader's LEO (or from where the LEO was at its previous fetch);
* the ISR shrinks by followers not caught up for ``replica.lag.time.max.ms`` and grows
  by followers that reached the high watermark -- both through the controller
  (:meth:`Controller.alter_partition`), applied only once it accepted;
* HW = the smallest LEO over the ISR; it only moves forward, and moving it releases
  acks=all waiters and long-polling consumers.

Following: one fetcher task per leader broker pulls every partition this broker
follows from it, copying frames byte for byte (same offsets, same leader epochs). Each
fetch says where the follower's log ends and in which epoch; a leader that does not
have that epoch ending there answers with where it does end (Kafka's diverging epoch,
KIP-320), and the follower truncates to it before fetching again.

Thread-safety: event loop only (the disk work inside the partition logs runs in
worker threads).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laketail.cluster.metadata import NO_LEADER, ClusterImage, PartitionRegistration
from laketail.errors import (
    FencedLeaderEpoch,
    LaketailError,
    LeaderNotAvailable,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    RequestTimedOut,
)
from laketail.storage.partition_log import OffsetBelowHotTier, PartitionLog

if TYPE_CHECKING:
    from laketail.cluster.node import ClusterNode
    from laketail.cluster.ports import LeadershipListener

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")


@dataclass
class FollowerState:
    caught_up: float  # the clock's monotonic time it was last caught up (at first: when leadership began)
    leo: int = -1  # unknown until its first fetch
    last_fetch: float = 0.0
    leo_at_last_fetch: int = -1


@dataclass
class LeaderState:
    reg: PartitionRegistration
    plog: PartitionLog
    followers: dict[int, FollowerState]
    waiters: list[tuple[int, asyncio.Future]] = field(default_factory=list)
    altering: bool = False


def encode_fetch_response(parts: list[dict], chunks: list[bytes]) -> bytes:
    head = json.dumps({"partitions": parts}).encode()
    return _LEN.pack(len(head)) + head + b"".join(chunks)


def decode_fetch_response(body: bytes) -> list[tuple[dict, bytes]]:
    (n,) = _LEN.unpack_from(body, 0)
    parts = json.loads(body[4:4 + n])["partitions"]
    out, pos = [], 4 + n
    for part in parts:
        size = part.get("size", 0)
        out.append((part, body[pos:pos + size]))
        pos += size
    return out


#: How long a produce or fetch waits for this broker to take up a leadership the cluster
#: image already gives it (:meth:`ReplicaManager.wait_leading`).
LEADERSHIP_WAIT_S = 5.0


class ReplicaManager:
    """This broker's side of replication, for every partition it leads or follows.

    :meth:`apply` takes each new cluster image and makes this broker lead, follow or drop
    each of its replicas. As leader (``leading``: a :class:`LeaderState` per partition) it
    answers followers' fetches (:meth:`handle_fetch`), records their positions, moves the
    high watermark to the smallest log end over the ISR, asks the controller to shrink or
    grow the ISR, and makes ``acks=all`` produce wait for it (:meth:`check_min_isr`,
    :meth:`wait_replicated`). As follower it runs one fetch loop per leader broker,
    appending the leader's frames unchanged and truncating on a diverging epoch.

    Thread-safety: event loop only; the partition logs' disk work runs in worker threads.
    """

    def __init__(self, node: "ClusterNode") -> None:
        self.node = node
        self.host = node.host
        self.me = node.broker_id
        self.leading: dict[tuple[str, int], LeaderState] = {}
        self.following: dict[tuple[str, int], PartitionRegistration] = {}
        self._fetchers: dict[int, asyncio.Task] = {}
        self._isr_task: asyncio.Task | None = None
        self._applied = asyncio.Event()  # set (and replaced) at the end of each apply
        #: told of every leadership this broker takes up or gives up (cluster/ports.py)
        self.listeners: list[LeadershipListener] = []

    def stop(self) -> None:
        """Cancel the fetcher tasks and the ISR check (shutdown; they end at their next await)."""
        for task in list(self._fetchers.values()):
            task.cancel()
        if self._isr_task is not None:
            self._isr_task.cancel()

    # -- applying the controller's decisions ------------------------------------------------------

    async def apply(self, image: ClusterImage) -> None:
        try:
            await self._apply(image)
        finally:
            applied, self._applied = self._applied, asyncio.Event()
            applied.set()

    async def wait_leading(self, topic: str, partition: int, timeout_s: float = LEADERSHIP_WAIT_S) -> bool:
        """Whether this broker leads the partition, waiting (at most ``timeout_s``) while
        the cluster image already names it leader and the apply in progress has not yet
        made it so -- a topic just created, an election just won. Without the wait such a
        broker would answer NOT_LEADER_OR_FOLLOWER naming itself, or forward to itself."""
        key = (topic, partition)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while key not in self.leading:
            reg = self.node.image.partitions.get(key)
            remaining = deadline - asyncio.get_running_loop().time()
            if reg is None or reg.leader != self.me or self.node.fenced or remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._applied.wait(), remaining)
            except TimeoutError:
                return False
        return not self.node.fenced

    async def _apply(self, image: ClusterImage) -> None:
        host = self.host
        for (topic, p), reg in sorted(image.partitions.items()):
            if not host.has_topic(topic):
                continue
            key = (topic, p)
            if self.me not in reg.replicas:
                continue
            plog = await host.open_partition(topic, p, replicated=len(reg.replicas) > 1)
            if reg.leader == self.me:
                state = self.leading.get(key)
                if state is None or state.reg.leader_epoch != reg.leader_epoch:
                    await self._become_leader(reg, plog)
                else:
                    state.reg = reg  # an ISR change the controller made (a dead follower)
                    self._update_hw(state)
            else:
                old = self.following.get(key)
                if (key in self.leading or old is None or old.leader_epoch != reg.leader_epoch
                        or old.leader != reg.leader):
                    self._become_follower(reg, plog)
                else:
                    self.following[key] = reg
        for key in list(self.leading):
            if key not in image.partitions or image.partitions[key].leader != self.me:
                if key not in image.partitions:
                    self._stop_leading(key)
        for key in list(self.following):
            if key not in image.partitions:
                del self.following[key]
        self._sync_fetchers(image)
        if self._isr_task is None and self.node.loops:
            self._isr_task = asyncio.create_task(self._isr_loop(), name="laketail-isr")

    async def _become_leader(self, reg: PartitionRegistration, plog: PartitionLog) -> None:
        key = (reg.topic, reg.partition)
        self.following.pop(key, None)
        # Another leader may have tiered more than this broker saw as a follower.
        await asyncio.to_thread(self.host.tables.refresh, reg.topic)
        tiered = self.host.tables.tiered_offset(reg.topic, reg.partition)
        if tiered > plog.log_end_offset:
            # Only after an unclean election: the table holds offsets this log never got.
            # Continue after them rather than give the same offsets to other records.
            log.warning("%s-%d: the table is tiered to %d, past this log's end %d; restarting the log there",
                        reg.topic, reg.partition, tiered, plog.log_end_offset)
            await asyncio.to_thread(plog.reset_to, tiered)
        plog.mark_tiered(tiered)
        if plog.producer_state.markers_from > 0:
            # The hot log restarted above the table's end: its producer state knows no
            # transaction below it. The table does (read_committed, the LSO need them).
            learned = await asyncio.to_thread(self.host.tables.learn_transactions, reg.topic, plog)
            log.info("%s-%d: learned %d transaction markers below the hot log from the table",
                     reg.topic, reg.partition, learned)
        plog.assign_epoch(reg.leader_epoch)
        now = self.node.clock.monotonic()
        followers = {r: FollowerState(now) for r in reg.replicas if r != self.me}
        old = self.leading.get(key)
        state = LeaderState(reg, plog, followers, old.waiters if old else [])
        self.leading[key] = state
        plog.lead(lambda _plog: self._update_hw(state))
        log.info("%s-%d: leading at epoch %d (ISR %s)", reg.topic, reg.partition, reg.leader_epoch, reg.isr)
        self._update_hw(state)
        self._tell("on_election", reg.topic, reg.partition, reg.leader_epoch)
        if plog.log_end_offset > plog.tiered_offset:
            # Records the previous leader left untiered: tier them at the next pass. (A new
            # partition has none, and its first pass waits table.flush.interval.ms.)
            self.host.schedule_tiering(reg.topic)

    def _become_follower(self, reg: PartitionRegistration, plog: PartitionLog) -> None:
        key = (reg.topic, reg.partition)
        self._stop_leading(key, reg.leader_epoch)
        plog.follow()
        self.following[key] = reg
        if reg.leader == NO_LEADER:
            log.info("%s-%d: offline (no leader)", reg.topic, reg.partition)
        else:
            log.info("%s-%d: following broker %d at epoch %d", reg.topic, reg.partition, reg.leader, reg.leader_epoch)

    def _stop_leading(self, key: tuple[str, int], leader_epoch: int | None = None) -> None:
        state = self.leading.pop(key, None)
        if state is None:
            return
        self._tell("on_resignation", key[0], key[1], leader_epoch)
        state.plog.follow()
        for _, future in state.waiters:
            if not future.done():
                future.set_exception(NotLeaderOrFollower(
                    f"{key[0]}-{key[1]}: broker {self.me} stopped leading before the record was replicated"
                ))
        state.waiters.clear()

    def _tell(self, event: str, topic: str, partition: int, leader_epoch: int | None) -> None:
        """Call ``event`` (on_election, on_resignation) on every listener."""
        for listener in list(self.listeners):
            try:
                getattr(listener, event)(topic, partition, leader_epoch)
            except Exception:
                log.exception("%s-%d: a leadership listener's %s failed", topic, partition, event)

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self.leading if k[0] == topic]:
            self._stop_leading(key)
        for key in [k for k in self.following if k[0] == topic]:
            del self.following[key]

    # -- leader side ----------------------------------------------------------------------------------

    def leads(self, topic: str, partition: int) -> bool:
        """Whether this broker has taken up the partition's leadership (fenced or not:
        :meth:`leader_state` refuses a fenced leader)."""
        return (topic, partition) in self.leading

    def leader_epoch(self, topic: str, partition: int, plog: PartitionLog | None = None) -> int | None:
        """The leader epoch this broker leads the partition at, None when it does not
        (or, given ``plog``, when it leads through another log object: one reopened)."""
        state = self.leading.get((topic, partition))
        if state is None or (plog is not None and state.plog is not plog):
            return None
        return state.reg.leader_epoch

    def leader_state(self, topic: str, partition: int) -> LeaderState:
        state = self.leading.get((topic, partition))
        if state is None or self.node.fenced:
            reg = self.node.image.partitions.get((topic, partition))
            if reg is None or reg.leader == NO_LEADER:
                raise LeaderNotAvailable(f"{topic}-{partition} has no leader right now")
            raise NotLeaderOrFollower(f"broker {self.me} does not lead {topic}-{partition} (broker {reg.leader} does)")
        return state

    def check_min_isr(self, topic: str, partition: int, min_insync: int) -> None:
        state = self.leader_state(topic, partition)
        if len(state.reg.isr) < min_insync:
            raise NotEnoughReplicas(
                f"{topic}-{partition} has {len(state.reg.isr)} in-sync replica(s) {state.reg.isr}, "
                f"fewer than min.insync.replicas={min_insync}"
            )

    async def wait_replicated(
        self, topic: str, partition: int, end_offset: int, min_insync: int, timeout_s: float
    ) -> None:
        """acks=all: return once HW reaches ``end_offset`` with the ISR still at least
        ``min_insync`` strong. The records are written already: losing the leadership
        is NOT_LEADER_OR_FOLLOWER (as Kafka answers a produce waiting in purgatory; the
        new leader may hold them), never an error that says nothing was written."""
        try:
            state = self.leader_state(topic, partition)
        except LeaderNotAvailable as exc:
            raise NotLeaderOrFollower(
                f"{topic}-{partition}: broker {self.me} stopped leading after the append; the records "
                f"may be on the next leader"
            ) from exc
        if state.plog.high_watermark < end_offset:
            future = asyncio.get_running_loop().create_future()
            state.waiters.append((end_offset, future))
            try:
                await asyncio.wait_for(asyncio.shield(future), timeout_s)
            except TimeoutError:
                raise RequestTimedOut(
                    f"{topic}-{partition}: not replicated to the ISR {state.reg.isr} within {timeout_s:.0f} s"
                ) from None
        if len(state.reg.isr) < min_insync:
            raise NotEnoughReplicasAfterAppend(
                f"{topic}-{partition}: written, but the ISR shrank to {state.reg.isr}, fewer than "
                f"min.insync.replicas={min_insync}"
            )

    def _update_hw(self, state: LeaderState) -> None:
        plog = state.plog
        hw = plog.log_end_offset
        for r in state.reg.isr:
            if r == self.me:
                continue
            follower = state.followers.get(r)
            hw = min(hw, follower.leo if follower is not None else -1)
        if hw > plog.high_watermark:
            plog.set_high_watermark(hw)
        if state.waiters:
            done = [(o, f) for o, f in state.waiters if o <= plog.high_watermark]
            if done:
                state.waiters = [(o, f) for o, f in state.waiters if o > plog.high_watermark]
                for _, future in done:
                    if not future.done():
                        future.set_result(None)

    async def handle_fetch(self, replica_id: int, partitions: list[dict], max_wait_ms: int, max_bytes: int) -> bytes:
        """A follower's fetch: record its positions, answer with frames (long-polling up
        to ``max_wait_ms`` when there is nothing new)."""
        now = self.node.clock.monotonic()
        answers: list[dict] = []
        wanted: list[tuple[int, PartitionLog, int]] = []
        for i, req in enumerate(partitions):
            topic, p = req["topic"], req["partition"]
            answer = {"topic": topic, "partition": p, "error": None, "size": 0}
            answers.append(answer)
            state = self.leading.get((topic, p))
            if state is None or self.node.fenced:
                answer["error"] = "NOT_LEADER_OR_FOLLOWER"
                continue
            if req["leader_epoch"] != state.reg.leader_epoch:
                answer["error"] = (
                    "FENCED_LEADER_EPOCH" if req["leader_epoch"] < state.reg.leader_epoch else "UNKNOWN_LEADER_EPOCH"
                )
                continue
            plog = state.plog
            offset, last_epoch = req["fetch_offset"], req["last_fetched_epoch"]
            if last_epoch >= 0:
                epoch, end = plog.end_offset_for_epoch(last_epoch)
                if epoch != last_epoch or end < offset:
                    answer["diverging"] = {"epoch": epoch, "end_offset": end}
                    answer["hot_start"] = plog.hot_start_offset
                    continue
            if offset > plog.log_end_offset:
                answer["diverging"] = {"epoch": plog.latest_epoch, "end_offset": plog.log_end_offset}
                continue
            if offset < plog.hot_start_offset:
                answer["error"] = "OFFSET_OUT_OF_RANGE"
                answer["hot_start"] = plog.hot_start_offset
                continue
            self._record_position(state, replica_id, offset, now)
            wanted.append((i, plog, offset))
        chunks = await self._read(answers, wanted, max_bytes)
        if wanted and not any(chunks) and max_wait_ms > 0:
            waits = [asyncio.ensure_future(plog.wait_for_leo(offset, max_wait_ms / 1000)) for _, plog, offset in wanted]
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            chunks = await self._read(answers, wanted, max_bytes)
        body_chunks = []
        for i, answer in enumerate(answers):
            data = chunks[i] if i < len(chunks) else b""
            answer["size"] = len(data)
            body_chunks.append(data)
        return encode_fetch_response(answers, body_chunks)

    async def _read(self, answers: list[dict], wanted, max_bytes: int) -> list[bytes]:
        chunks = [b""] * len(answers)
        budget = max_bytes
        for i, plog, offset in wanted:
            try:
                if offset >= plog.high_watermark:
                    # Records not yet replicated were appended moments ago: their bytes are
                    # in the page cache, and a caught-up follower's fetch (the one acks=all
                    # waits for) reads them without a hop to a worker thread.
                    data = plog.read_raw(offset, budget)
                else:
                    data = await asyncio.to_thread(plog.read_raw, offset, budget)
            except OffsetBelowHotTier:
                answers[i]["error"] = "OFFSET_OUT_OF_RANGE"
                answers[i]["hot_start"] = plog.hot_start_offset
                continue
            chunks[i] = data
            budget = max(budget - len(data), 1)
            answers[i]["hw"] = plog.high_watermark
            answers[i]["log_start"] = plog.log_start_offset
            answers[i]["leo"] = plog.log_end_offset
        return chunks

    def _record_position(self, state: LeaderState, replica_id: int, offset: int, now: float) -> None:
        follower = state.followers.get(replica_id)
        if follower is None:
            return
        leo = state.plog.log_end_offset
        if offset >= leo:
            follower.caught_up = now
        elif offset >= follower.leo_at_last_fetch >= 0:
            follower.caught_up = max(follower.caught_up, follower.last_fetch)
        follower.leo = offset
        follower.last_fetch = now
        follower.leo_at_last_fetch = leo
        if replica_id not in state.reg.isr and offset >= state.plog.high_watermark and not state.altering:
            start = next((s for e, s in state.plog.epochs if e == state.reg.leader_epoch), 0)
            if offset >= start:
                self._alter_isr(state, state.reg.isr + [replica_id])
        self._update_hw(state)

    def _alter_isr(self, state: LeaderState, isr: list[int]) -> None:
        state.altering = True
        asyncio.get_running_loop().create_task(self._send_alter(state, isr))

    async def _send_alter(self, state: LeaderState, isr: list[int]) -> None:
        reg = state.reg
        try:
            new = await self.node.alter_partition(reg, isr)
            if self.leading.get((reg.topic, reg.partition)) is state and new.leader_epoch == state.reg.leader_epoch:
                state.reg = new
                self._update_hw(state)
        except FencedLeaderEpoch as exc:
            log.info("ISR change refused: %s", exc.message)
            await self.node.refresh_metadata()
        except Exception as exc:
            log.warning("ISR change of %s-%d to %s failed: %s", reg.topic, reg.partition, isr, exc)
        finally:
            state.altering = False

    async def _isr_loop(self) -> None:
        lag_max = self.host.settings.replica_lag_time_max_ms / 1000
        while True:
            await asyncio.sleep(min(lag_max / 2, 0.5))
            self.check_isr()

    def check_isr(self) -> None:
        """One round of the ISR loop: ask the controller to drop from the ISR of each
        partition led here the followers not caught up for ``replica.lag.time.max.ms``
        (by the node's clock). The change is sent in the background (:meth:`_alter_isr`)."""
        lag_max = self.host.settings.replica_lag_time_max_ms / 1000
        now = self.node.clock.monotonic()
        for state in list(self.leading.values()):
            if state.altering:
                continue
            slow = [
                r for r in state.reg.isr
                if r != self.me and r in state.followers and now - state.followers[r].caught_up > lag_max
            ]
            if slow:
                log.info("%s-%d: followers %s lag more than %.1f s; shrinking the ISR",
                         state.reg.topic, state.reg.partition, slow, lag_max)
                self._alter_isr(state, [r for r in state.reg.isr if r not in slow])

    # -- follower side ------------------------------------------------------------------------------------

    def _sync_fetchers(self, image: ClusterImage) -> None:
        leaders = {reg.leader for reg in self.following.values() if reg.leader not in (NO_LEADER, self.me)}
        for leader in leaders:
            task = self._fetchers.get(leader)
            if task is None or task.done():
                self._fetchers[leader] = asyncio.create_task(self._fetch_loop(leader), name=f"laketail-fetch-{leader}")
        for leader in list(self._fetchers):
            if leader not in leaders:
                self._fetchers.pop(leader).cancel()

    async def _fetch_loop(self, leader: int) -> None:
        settings = self.host.settings
        while True:
            parts = [(key, reg) for key, reg in self.following.items() if reg.leader == leader]
            if not parts:
                return
            body: dict[str, Any] = {
                "replica_id": self.me,
                "max_wait_ms": settings.replica_fetch_wait_max_ms,
                "max_bytes": settings.replica_fetch_max_bytes,
                "partitions": [],
            }
            plogs = {}
            for (topic, p), reg in parts:
                try:
                    plog = self.host.logs.get(topic, p)
                except LaketailError:
                    continue
                plogs[(topic, p)] = plog
                body["partitions"].append({
                    "topic": topic, "partition": p, "fetch_offset": plog.log_end_offset,
                    "last_fetched_epoch": plog.latest_epoch, "leader_epoch": reg.leader_epoch,
                })
            try:
                raw = await self.node.replica_fetch(leader, body)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("fetch from broker %d failed: %s", leader, exc)
                await asyncio.sleep(0.2)
                continue
            progressed = False
            for answer, data in decode_fetch_response(raw):
                key = (answer["topic"], answer["partition"])
                fetched = plogs.get(key)
                if fetched is None or self.following.get(key) is None or self.following[key].leader != leader:
                    continue
                try:
                    progressed |= await self._apply_answer(fetched, answer, data)
                except Exception:
                    log.exception("applying the leader's answer for %s-%d failed", *key)
            if not progressed and any(a.get("error") for a, _ in decode_fetch_response(raw)):
                await asyncio.sleep(0.1)  # a stale epoch on one side: let metadata catch up

    async def _apply_answer(self, plog: PartitionLog, answer: dict, data: bytes) -> bool:
        diverging = answer.get("diverging")
        if diverging is not None:
            epoch, end = diverging["epoch"], diverging["end_offset"]
            if epoch < 0:
                target = answer.get("hot_start", plog.log_end_offset)
                await asyncio.to_thread(plog.reset_to, target)
            else:
                await asyncio.to_thread(plog.truncate_to, divergence_point(plog, epoch, end))
            return True
        error = answer.get("error")
        if error == "OFFSET_OUT_OF_RANGE":
            await asyncio.to_thread(plog.reset_to, answer["hot_start"])
            return True
        if error:
            return False
        if data:  # the leader's LEO bounds how many records the frames hold
            bound = answer["leo"] - plog.log_end_offset if "leo" in answer else None
            await plog.append_raw(data, at_most_records=bound)
        if "hw" in answer:
            plog.set_high_watermark(answer["hw"])  # never past this log's end
            plog.advance_log_start(answer["log_start"])
        return bool(data)


def divergence_point(plog: PartitionLog, epoch: int, end: int) -> int:
    """Where a follower cuts its log when the leader says its epoch ``epoch`` ended at
    ``end`` (Kafka's rule): if the follower had that epoch too, at the earlier of the two
    ends; if the follower's nearest epoch is older, at that epoch's end here (then it
    asks again about it); if it has no epoch that old, everything it holds diverges
    (cut at its first epoch's start, never above ``end``)."""
    mine_epoch, mine_end = plog.end_offset_for_epoch(epoch)
    if mine_epoch == epoch:
        return min(end, mine_end, plog.log_end_offset)
    if mine_epoch >= 0:
        return min(mine_end, plog.log_end_offset)
    first = plog.epochs[0][1] if plog.epochs else plog.log_end_offset
    return min(end, first, plog.log_end_offset)
