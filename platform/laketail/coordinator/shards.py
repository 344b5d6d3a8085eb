"""Which partitions of an internal topic a coordinator runs, and whether each is loaded.

Role: Kafka's ``CoordinatorRuntime`` keeps one shard per partition of
``__consumer_offsets`` (and of ``__transaction_state``), scheduled for loading when its
broker is elected the partition's coordinator (``onElection(partition, epoch)``) and
unloaded when it resigns (``onResignation(partition, epoch)``). :class:`ShardOwnership`
is that bookkeeping for one topic, apart from the state the shards hold:

* a partition is *not owned* until it is elected: what keeps its state there (a group,
  a transactional id) is answered NOT_COORDINATOR, the client looks the coordinator up
  again;
* an elected partition is *loading* until its records have been read to the high
  watermark and replayed (:meth:`ShardOwnership.activate`): answered
  COORDINATOR_LOAD_IN_PROGRESS, the client retries here; a load that failed leaves it
  loading, with the reason, until the caller loads it again or resigns it;
* then *active*: served.

Epochs order elections and resignations of one partition (Kafka uses the partition's
leader epoch; laketail's coordinators pass the controller epoch they took over at): a
resignation older than the election held is ignored, and a load that finishes after
its partition was resigned or elected again at another epoch is dropped
(:meth:`activate` answers False), so a slow load can never bring back a shard the
coordinator has given up.

A coordinator that is never elected or resigned anything (a unit test's) runs every
partition, all active (:attr:`ShardOwnership.everything`); the first election ends that
(from then on only what is elected runs here), and so does a first resignation (after
:meth:`ShardOwnership.pin`, the other partitions keep running).

Thread-safety: event loop thread only.
"""

from __future__ import annotations

from laketail.errors import CoordinatorLoadInProgress, NotCoordinator

#: why an elected partition is not served yet, before its load says more
LOADING = "its records are being read to the high watermark"


class ShardOwnership:
    """The partitions of ``topic`` this coordinator runs (see the module docstring)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        #: True until the first election or resignation: every partition runs here, loaded
        self.everything = True
        self._epochs: dict[int, int] = {}  # partition -> the epoch it was elected at
        self._loading: dict[int, str] = {}  # elected partitions not served yet -> why
        self._generations: dict[int, int] = {}  # partition -> elections and resignations seen

    def pin(self, partitions: range, epoch: int) -> None:
        """End :attr:`everything`: from now on exactly ``partitions`` run here, loaded, as
        if elected at ``epoch`` (before a first election or resignation of one of them,
        so that the others keep running). Nothing happens when elections began already."""
        if self.everything:
            self.everything = False
            self._epochs = dict.fromkeys(partitions, epoch)

    def elect(self, partition: int, epoch: int) -> bool:
        """This coordinator now runs ``partition`` (at ``epoch``): it is loading until
        :meth:`activate`. False (nothing changes) when it was elected at a newer epoch."""
        self.everything = False
        held = self._epochs.get(partition)
        if held is not None and held > epoch:
            return False
        self._epochs[partition] = epoch
        self._loading[partition] = LOADING
        self._generations[partition] = self._generations.get(partition, 0) + 1
        return True

    def activate(self, partition: int, epoch: int) -> bool:
        """The load of ``partition`` elected at ``epoch`` is done: serve it. False when
        the partition was resigned or elected again at another epoch meanwhile (the
        load's result must then be dropped)."""
        if self._epochs.get(partition) != epoch:
            return False
        self._loading.pop(partition, None)
        return True

    def stall(self, partition: int, epoch: int, why: str) -> None:
        """The load of ``partition`` (elected at ``epoch``) failed: it stays loading,
        answered with ``why``, until it is loaded again or resigned."""
        if self._epochs.get(partition) == epoch:
            self._loading[partition] = why

    def resign(self, partition: int, epoch: int | None = None) -> bool:
        """This coordinator no longer runs ``partition``: NOT_COORDINATOR from now on.
        ``epoch`` is the epoch of the resignation; one older than the election held is
        ignored (False). None resigns whatever is held."""
        self.everything = False
        held = self._epochs.get(partition)
        if held is None or (epoch is not None and epoch < held):
            return False
        del self._epochs[partition]
        self._loading.pop(partition, None)
        self._generations[partition] = self._generations.get(partition, 0) + 1
        return True

    def generation(self, partition: int) -> int:
        """How many times ``partition`` was elected or resigned here: a write that began
        at one generation and ends at another crossed an unload (its record is the next
        load's to replay, not the write's)."""
        return self._generations.get(partition, 0)

    def epoch(self, partition: int) -> int | None:
        """The epoch ``partition`` was elected at; None when it is not owned."""
        return self._epochs.get(partition)

    def owns(self, partition: int) -> bool:
        """Whether ``partition`` runs here (loading or active)."""
        return self.everything or partition in self._epochs

    def serves(self, partition: int) -> bool:
        """Whether ``partition`` runs here and is loaded."""
        return self.everything or (partition in self._epochs and partition not in self._loading)

    def owned(self) -> list[int]:
        """The partitions elected here, sorted (empty for :attr:`everything`)."""
        return sorted(self._epochs)

    def loading(self) -> dict[int, str]:
        """The elected partitions not served yet -> why."""
        return dict(self._loading)

    def check(self, partition: int, whose: str) -> None:
        """NOT_COORDINATOR when ``partition`` does not run here, COORDINATOR_LOAD_IN_PROGRESS
        while it loads; ``whose`` names what keeps its state there (``group 'g'``)."""
        if self.everything:
            return
        if partition not in self._epochs:
            raise NotCoordinator(f"{self.topic}-{partition}, where {whose} keeps its state, "
                                 "is not coordinated here: look the coordinator up again")
        why = self._loading.get(partition)
        if why is not None:
            raise CoordinatorLoadInProgress(f"{self.topic}-{partition}, where {whose} keeps its state, "
                                            f"is loading here ({why}); retry")
