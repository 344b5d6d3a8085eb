"""Replication across brokers (docs/architecture.md §4.5 and §8).

* :mod:`.metadata` -- what the cluster looks like: brokers, partition registrations
  (replicas, leader, leader epoch, ISR), one versioned image;
* :mod:`.store` -- the catalog tables that hold it (``_system/brokers``,
  ``_system/controller``, ``_system/replicas``), changed by conflict-checked overwrites;
* :mod:`.controller` -- the one broker that decides: liveness, assignments, ISR
  changes, leader elections;
* :mod:`.replicas` -- every broker's side: leading (follower positions, ISR, high
  watermark, acks=all) and following (fetching, truncating a divergent suffix);
* :mod:`.node` -- membership: registration, finding or becoming the controller,
  heartbeats, and the internal HTTP calls between brokers.
"""
