"""What every route of the gateway requires: the one route -> permission table.

Each entry names a route as FastAPI registered it (``"METHOD path"``) and the ACL
permission its Kafka equivalent requires (Kafka's "Operations and Resources on
Protocols" table), checked by :class:`laketail.api.authz.Authorization` before the
request reaches the route, the hot produce/fetch dispatch or the coordinator proxy.
A route that is not in the table is refused to everybody but super users, and
``tests/security/test_route_walk.py`` fails until it is added.

Kinds of entries:

* ``needs(...)``: every listed permission, each on the cluster or on the resource
  named by a path parameter (``topic``, ``group``, ``transactional_id``, ...);
  ``any_of=True``: one of them is enough (CreateTopics: Create on the cluster or on
  the topic);
* ``produce``: Write on the topic; Create on the cluster or the topic when the produce
  would auto-create it; and when the query names a producer (parsed once, decoded, by
  :func:`laketail.api.deps.producer_params`, and the route executes that parse) for an
  idempotent (not transactional) batch, IdempotentWrite on the cluster; for a
  transactional one (it adds its partition to the transaction), Write on the
  producer's transactional id;
* ``IN_HANDLER``: the resource is in the body, so the route checks it itself
  (``laketail.api.authz.check``), as noted beside the entry;
* ``LISTING``: no permission to call; the answer holds only what the principal may
  Describe (Kafka's Metadata and ListGroups);
* ``OPEN``: no permission, as Kafka's Metadata answers brokers and the cluster id to
  anyone; and the API's own description (``/docs``, ``/redoc``, ``/openapi.json``).

Decided for laketail: ``/metrics`` needs Describe on the cluster (it names every topic
and group); the Spark table location (``/v1/topics/{t}/table``) needs Read on the
topic (Spark then reads the files, protected by the storage's own permissions);
``/v1/sinks/{sink_id}`` batches need Write on the transactional id named by the sink
id, and so do the sink's sessions (``/v1/transactions/__sink:<sink_id>:...``, see
:func:`laketail.api.authz.resource_name`); ``/internal`` routes need
ClusterAction on the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from laketail.security.acl import AclOperation as Op
from laketail.security.acl import ResourceType as R


@dataclass(frozen=True, slots=True)
class Need:
    """One permission: ``operation`` on the cluster (``param`` None) or on the resource of
    ``resource_type`` the path parameter ``param`` names."""

    operation: Op
    resource_type: R
    param: str | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    needs: tuple[Need, ...] = ()
    any_of: bool = False
    produce: bool = False
    kind: str = "checked"  # "checked", "in_handler", "listing", "open"
    note: str = ""


def needs(*items: Need, any_of: bool = False, note: str = "") -> Rule:
    return Rule(tuple(items), any_of=any_of, note=note)


def topic(op: Op, param: str = "topic") -> Need:
    return Need(op, R.TOPIC, param)


def group(op: Op, param: str = "group") -> Need:
    return Need(op, R.GROUP, param)


def txn(op: Op, param: str = "transactional_id") -> Need:
    return Need(op, R.TRANSACTIONAL_ID, param)


def subject(op: Op, param: str = "subject") -> Need:
    return Need(op, R.SUBJECT, param)


def cluster(op: Op) -> Need:
    return Need(op, R.CLUSTER)


def in_handler(note: str, *items: Need) -> Rule:
    return Rule(tuple(items), kind="in_handler", note=note)


PRODUCE = Rule((topic(Op.WRITE),), produce=True)
LISTING = Rule(kind="listing")
OPEN = Rule(kind="open")
_CONSUMER = "/consumers/{group}/instances/{instance}"
_V3 = "/v3/clusters/{cluster_id}"
_GROUPS = _V3 + "/consumer-groups"
_INTERNAL = "/internal/v1"

RULES: dict[str, Rule] = {
    # -- the API's description, cluster metadata, metrics --------------------------------------
    "GET /openapi.json": OPEN,
    "GET /docs": OPEN,
    "GET /redoc": OPEN,
    "GET /docs/oauth2-redirect": OPEN,
    "MOUNT /docs-assets": OPEN,  # the UIs' packaged scripts and styles
    "GET /metrics": needs(cluster(Op.DESCRIBE)),
    "GET /brokers": OPEN,
    "GET /v3/clusters": OPEN,
    f"GET {_V3}": OPEN,
    f"GET {_V3}/brokers": OPEN,
    f"GET {_V3}/brokers/{{broker_id}}": OPEN,
    # -- v2 topics, produce, fetch ---------------------------------------------------------
    "GET /topics": LISTING,
    # a v2 topic carries its configs: DescribeConfigs too, as REST Proxy's describeConfigs
    "GET /topics/{topic}": needs(topic(Op.DESCRIBE), topic(Op.DESCRIBE_CONFIGS)),
    "GET /topics/{topic}/partitions": needs(
        topic(Op.DESCRIBE), note="Metadata: with allow_auto_topic_creation, Create to create it"),
    "GET /topics/{topic}/partitions/{partition}": needs(topic(Op.DESCRIBE)),
    "GET /topics/{topic}/partitions/{partition}/offsets": needs(topic(Op.DESCRIBE)),  # ListOffsets
    "POST /topics/{topic}": PRODUCE,
    "POST /topics/{topic}/partitions/{partition}": PRODUCE,
    "GET /topics/{topic}/partitions/{partition}/records": needs(topic(Op.READ)),  # Fetch
    # -- v1: Arrow, offsets, check, Spark --------------------------------------------------
    "POST /v1/topics/{topic}/records": PRODUCE,
    "POST /v1/topics/{topic}/partitions/{partition}/records": PRODUCE,
    "GET /v1/topics/{topic}/partitions/{partition}/records": needs(topic(Op.READ)),
    "GET /v1/topics/{topic}/partitions/{partition}/offsets": needs(topic(Op.DESCRIBE)),
    "GET /v1/topics/{topic}/check": needs(topic(Op.DESCRIBE)),
    "GET /v1/topics/{topic}/damage": needs(topic(Op.DESCRIBE)),
    "GET /v1/topics/{topic}/table": needs(topic(Op.READ)),
    # -- v1 group protocol -------------------------------------------------------------------
    "POST /v1/groups/{group}/join": needs(group(Op.READ)),
    "POST /v1/groups/{group}/sync": needs(group(Op.READ)),
    "POST /v1/groups/{group}/heartbeat": needs(group(Op.READ)),
    "POST /v1/groups/{group}/leave": needs(group(Op.READ)),
    "POST /v1/groups/{group}/commit": needs(group(Op.READ), note="and Read on each topic of the body"),
    "POST /v1/groups/{group}/committed": needs(group(Op.DESCRIBE), note="and Describe on each topic of the body"),
    "POST /v1/groups/{group}/offsets/delete": needs(group(Op.DELETE), note="and Read on each topic of the body"),
    "GET /v1/groups": LISTING,
    "GET /v1/groups/{group}": needs(group(Op.DESCRIBE)),
    # -- v1 producers and transactions -------------------------------------------------------
    "POST /v1/producers": in_handler("InitProducerId: Write on the body's transactional_id, "
                                     "else IdempotentWrite on the cluster"),
    "POST /v1/transactions/{transactional_id:path}/begin": needs(txn(Op.WRITE)),
    "POST /v1/transactions/{transactional_id:path}/partitions": needs(
        txn(Op.WRITE), note="AddPartitionsToTxn: and Write on each topic of the body"),
    "POST /v1/transactions/{transactional_id:path}/offsets": needs(
        txn(Op.WRITE), note="AddOffsetsToTxn + TxnOffsetCommit: and Read on the body's group"),
    "POST /v1/transactions/{transactional_id:path}/commit": needs(txn(Op.WRITE)),  # EndTxn
    "POST /v1/transactions/{transactional_id:path}/abort": needs(txn(Op.WRITE)),
    "GET /v1/transactions/{transactional_id:path}": needs(txn(Op.DESCRIBE)),
    "POST /v1/sinks/{sink_id:path}/batches/{batch_id}/enlist": needs(txn(Op.WRITE, "sink_id")),
    "POST /v1/sinks/{sink_id:path}/batches/{batch_id}/commit": needs(txn(Op.WRITE, "sink_id")),
    "POST /v1/sinks/{sink_id:path}/batches/{batch_id}/abort": needs(txn(Op.WRITE, "sink_id")),
    "GET /v1/sinks/{sink_id:path}": needs(txn(Op.DESCRIBE, "sink_id")),
    # -- v2 consumer instances (JoinGroup/SyncGroup/Heartbeat/LeaveGroup: Read on the group) -
    # an instance is its creator's: to any other principal its routes answer 404 (routes/consumers.py)
    "POST /consumers/{group}": needs(group(Op.READ)),
    f"DELETE {_CONSUMER}": needs(group(Op.READ)),
    f"POST {_CONSUMER}/subscription": needs(
        group(Op.READ), note="Metadata: Create to auto-create a topic it may Describe (one it may not is not created)"),
    f"GET {_CONSUMER}/subscription": needs(group(Op.READ)),
    f"DELETE {_CONSUMER}/subscription": needs(group(Op.READ)),
    f"POST {_CONSUMER}/assignments": needs(
        group(Op.READ), note="and Describe on each topic (its existence is not told otherwise)"),
    f"GET {_CONSUMER}/assignments": needs(group(Op.READ)),
    f"POST {_CONSUMER}/positions": needs(group(Op.READ), note="by timestamp: and Describe on the topic (ListOffsets)"),
    f"POST {_CONSUMER}/positions/beginning": needs(group(Op.READ), note="and Describe on each topic (ListOffsets)"),
    f"POST {_CONSUMER}/positions/end": needs(group(Op.READ), note="and Describe on each topic (ListOffsets)"),
    f"GET {_CONSUMER}/records": needs(group(Op.READ), note="Fetch: and Read on each topic it returns"),
    f"POST {_CONSUMER}/offsets": needs(group(Op.READ), note="OffsetCommit: and Read on each topic committed "
                                                          "(no offsets: each topic of its positions and assignment)"),
    f"GET {_CONSUMER}/offsets": needs(group(Op.DESCRIBE), note="OffsetFetch: and Describe on each topic"),
    # -- v3 topics and configs -----------------------------------------------------------------
    f"GET {_V3}/topics": LISTING,
    f"POST {_V3}/topics": in_handler("CreateTopics: Create on the cluster or on the body's topic_name"),
    f"GET {_V3}/topics/{{topic}}": needs(topic(Op.DESCRIBE)),
    f"DELETE {_V3}/topics/{{topic}}": needs(topic(Op.DELETE)),
    f"PATCH {_V3}/topics/{{topic}}": needs(topic(Op.ALTER), note="CreatePartitions: Alter on the topic"),
    f"GET {_V3}/topics/{{topic}}/partitions": needs(topic(Op.DESCRIBE)),
    f"GET {_V3}/topics/{{topic}}/partitions/{{partition}}": needs(topic(Op.DESCRIBE)),
    f"GET {_V3}/topics/{{topic}}/configs": needs(topic(Op.DESCRIBE_CONFIGS)),
    f"POST {_V3}/topics/{{topic}}/configs:alter": needs(topic(Op.ALTER_CONFIGS)),
    f"GET {_V3}/topics/{{topic}}/configs/{{name}}": needs(topic(Op.DESCRIBE_CONFIGS)),
    f"PUT {_V3}/topics/{{topic}}/configs/{{name}}": needs(topic(Op.ALTER_CONFIGS)),
    f"DELETE {_V3}/topics/{{topic}}/configs/{{name}}": needs(topic(Op.ALTER_CONFIGS)),
    f"POST {_V3}/topics/{{topic}}/records": PRODUCE,
    f"POST {_V3}/topics/{{topic}}/partitions/{{partition}}/records": PRODUCE,
    # -- v3 replicas, reassignments, broker configs --------------------------------------------
    f"GET {_V3}/topics/{{topic}}/partitions/{{partition}}/replicas": needs(topic(Op.DESCRIBE)),
    f"GET {_V3}/topics/{{topic}}/partitions/{{partition}}/replicas/{{broker_id}}": needs(topic(Op.DESCRIBE)),
    f"GET {_V3}/brokers/{{broker_id}}/partition-replicas": needs(cluster(Op.DESCRIBE)),
    f"GET {_V3}/topics/-/partitions/-/reassignment": needs(cluster(Op.DESCRIBE)),
    f"GET {_V3}/topics/{{topic}}/partitions/-/reassignment": needs(topic(Op.DESCRIBE)),
    f"GET {_V3}/brokers/{{broker_id}}/configs": needs(cluster(Op.DESCRIBE_CONFIGS)),
    f"GET {_V3}/brokers/{{broker_id}}/configs/{{name}}": needs(cluster(Op.DESCRIBE_CONFIGS)),
    f"GET {_V3}/broker-configs": needs(cluster(Op.DESCRIBE_CONFIGS)),
    # -- v3 consumer groups (DescribeGroups; lag also reads committed offsets) -----------------
    f"GET {_GROUPS}": LISTING,
    f"GET {_GROUPS}/{{group_id}}": needs(group(Op.DESCRIBE, "group_id")),
    f"GET {_GROUPS}/{{group_id}}/consumers": needs(group(Op.DESCRIBE, "group_id")),
    f"GET {_GROUPS}/{{group_id}}/consumers/{{consumer_id}}": needs(group(Op.DESCRIBE, "group_id")),
    f"GET {_GROUPS}/{{group_id}}/consumers/{{consumer_id}}/assignments": needs(group(Op.DESCRIBE, "group_id")),
    f"GET {_GROUPS}/{{group_id}}/lags": needs(
        group(Op.DESCRIBE, "group_id"), note="OffsetFetch: topics without Describe are left out"),
    f"GET {_GROUPS}/{{group_id}}/lags/{{topic}}/partitions/{{partition}}": needs(
        group(Op.DESCRIBE, "group_id"), topic(Op.DESCRIBE)),
    f"GET {_GROUPS}/{{group_id}}/lag-summary": needs(
        group(Op.DESCRIBE, "group_id"), note="OffsetFetch: topics without Describe are left out"),
    # -- v3 ACLs (DescribeAcls, CreateAcls, DeleteAcls) ----------------------------------------
    f"GET {_V3}/acls": needs(cluster(Op.DESCRIBE)),
    f"POST {_V3}/acls": needs(cluster(Op.ALTER)),
    f"DELETE {_V3}/acls": needs(cluster(Op.ALTER)),
    f"POST {_V3}/acls:batch": needs(cluster(Op.ALTER)),
    # -- the web console: the page, and the JSON its views read (issue 19) ---------------------
    "GET /console": OPEN,
    "GET /console/": OPEN,
    "MOUNT /console/assets": OPEN,
    "GET /v1/console/overview": needs(cluster(Op.DESCRIBE)),
    "GET /v1/console/topics": LISTING,
    "GET /v1/console/topics/{topic}/partitions": needs(topic(Op.DESCRIBE)),
    "GET /v1/console/topics/{topic}/table": needs(topic(Op.DESCRIBE)),
    "GET /v1/console/groups": LISTING,
    "GET /v1/console/groups/{group_id}": needs(
        group(Op.DESCRIBE, "group_id"), note="OffsetFetch: topics without Describe are left out"),
    "GET /v1/console/groups/{group_id}/lag-history": needs(
        group(Op.DESCRIBE, "group_id"), note="and Describe on the topic asked; else only describable topics"),
    "POST /v1/console/groups/{group_id}/reset-offsets": needs(
        group(Op.READ, "group_id"), note="OffsetCommit: and Read on the body's topic"),
    "GET /v1/console/transactions": LISTING,
    "POST /v1/console/sql": in_handler("Read on each topic the query names"),
    # -- Confluent Schema Registry (laketail.schemas): Confluent RBAC's Subject resource is the
    # Subject ACL type; Read to read, Write to register, Delete to delete, DescribeConfigs /
    # AlterConfigs for a subject's compatibility and mode; the global ones are the cluster's
    "GET /schemas/types": OPEN,
    "GET /schemas/ids/{schema_id}": in_handler("Read on one subject holding the id"),
    "GET /schemas/ids/{schema_id}/schema": in_handler("Read on one subject holding the id"),
    "GET /schemas/ids/{schema_id}/versions": in_handler("Read on one subject holding the id"),
    "GET /schemas/ids/{schema_id}/subjects": in_handler("Read on one subject holding the id"),
    "GET /subjects": LISTING,
    "POST /subjects/{subject}": needs(subject(Op.READ)),
    "DELETE /subjects/{subject}": needs(subject(Op.DELETE)),
    "GET /subjects/{subject}/versions": needs(subject(Op.READ)),
    "POST /subjects/{subject}/versions": needs(subject(Op.WRITE)),
    "GET /subjects/{subject}/versions/{version}": needs(subject(Op.READ)),
    "GET /subjects/{subject}/versions/{version}/schema": needs(subject(Op.READ)),
    "GET /subjects/{subject}/versions/{version}/referencedby": needs(subject(Op.READ)),
    "DELETE /subjects/{subject}/versions/{version}": needs(subject(Op.DELETE)),
    "POST /compatibility/subjects/{subject}/versions/{version}": needs(subject(Op.READ)),
    "POST /compatibility/subjects/{subject}/versions": needs(subject(Op.READ)),
    "GET /config": needs(cluster(Op.DESCRIBE_CONFIGS)),
    "PUT /config": needs(cluster(Op.ALTER_CONFIGS)),
    "DELETE /config": needs(cluster(Op.ALTER_CONFIGS)),
    "GET /config/{subject}": needs(subject(Op.DESCRIBE_CONFIGS)),
    "PUT /config/{subject}": needs(subject(Op.ALTER_CONFIGS)),
    "DELETE /config/{subject}": needs(subject(Op.ALTER_CONFIGS)),
    "GET /mode": needs(cluster(Op.DESCRIBE_CONFIGS)),
    "PUT /mode": needs(cluster(Op.ALTER_CONFIGS)),
    "GET /mode/{subject}": needs(subject(Op.DESCRIBE_CONFIGS)),
    "PUT /mode/{subject}": needs(subject(Op.ALTER_CONFIGS)),
    "DELETE /mode/{subject}": needs(subject(Op.ALTER_CONFIGS)),
    # -- between brokers -------------------------------------------------------------------------
    f"POST {_INTERNAL}/heartbeat": needs(cluster(Op.CLUSTER_ACTION)),
    f"POST {_INTERNAL}/alter-partition": needs(cluster(Op.CLUSTER_ACTION)),
    f"POST {_INTERNAL}/topics": needs(cluster(Op.CLUSTER_ACTION)),
    f"DELETE {_INTERNAL}/topics/{{topic}}": needs(cluster(Op.CLUSTER_ACTION)),
    f"PUT {_INTERNAL}/topics/{{topic}}/configs": needs(cluster(Op.CLUSTER_ACTION)),
    f"POST {_INTERNAL}/topics/{{topic}}/partitions": needs(cluster(Op.CLUSTER_ACTION)),
    f"POST {_INTERNAL}/metadata": needs(cluster(Op.CLUSTER_ACTION)),
    f"POST {_INTERNAL}/replica-fetch": needs(cluster(Op.CLUSTER_ACTION)),
    f"POST {_INTERNAL}/partitions/{{topic}}/{{partition}}/append": needs(cluster(Op.CLUSTER_ACTION)),
    f"GET {_INTERNAL}/partitions/{{topic}}/{{partition}}/records": needs(cluster(Op.CLUSTER_ACTION)),
    f"GET {_INTERNAL}/partitions/{{topic}}/{{partition}}/state": needs(cluster(Op.CLUSTER_ACTION)),
    f"GET {_INTERNAL}/partitions/{{topic}}/{{partition}}/offset-for-timestamp": needs(cluster(Op.CLUSTER_ACTION)),
    f"GET {_INTERNAL}/partitions/{{topic}}/{{partition}}/epochs": needs(cluster(Op.CLUSTER_ACTION)),
    # only a peer reaches /internal (the cluster secret); the request it passes on is the
    # client's, authorized API by API for the principal it names (laketail.kafka.siblings)
    f"POST {_INTERNAL}/kafka/{{listener}}": in_handler("the Kafka APIs authorize the decoded request"),
}


def rule_for(method: str, path: str) -> Rule | None:
    """The entry for a route (``path`` as registered, e.g. ``/topics/{topic}``)."""
    return RULES.get(f"{method} {path}")
