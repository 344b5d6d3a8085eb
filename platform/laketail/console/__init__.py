"""What the web console needs beyond the gateway's other APIs, apart from HTTP.

* :mod:`.pages` -- one page of a long listing (``limit`` / ``offset``), so a cluster
  with thousands of partitions or groups answers in bounded time and size;
* :mod:`.reset` -- ``kafka-consumer-groups --reset-offsets``: where each partition's
  committed offset goes (pure);
* :mod:`.lag_history` -- a group's lag over time, read from ``_system/consumer_lag``;
* :mod:`.delta` -- a topic's Delta table in a few numbers (versions, files, last commit);
* :mod:`.sql` -- read-only, bounded SQL over topics' Delta tables with Apache
  DataFusion (delta-rs's ``QueryBuilder``), committed rows as the Spark views show them.

The routes are in :mod:`laketail.api.console`; the page itself is served from the
package data there.
"""
