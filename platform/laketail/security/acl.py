"""Kafka's ACL model and the decision it makes, as pure code (no IO, no clock).

Vocabulary, exactly Kafka's (``org.apache.kafka.common.acl`` / ``resource``):

* a **resource pattern** is a resource type (:class:`ResourceType`: Topic, Group,
  Cluster, TransactionalId; and Subject, Confluent RBAC's resource for the schema
  registry's subjects, :mod:`laketail.schemas`), a name and a pattern type (:class:`PatternType`):
  LITERAL matches the name exactly, and the literal name ``*`` matches every resource
  of the type; PREFIXED matches every name that starts with it;
* an **access control entry** is a principal (``User:alice``; ``User:*`` is every
  principal), a host (an address; ``*`` is every host), an operation
  (:class:`AclOperation`) and a permission (:class:`AclPermissionType`: ALLOW, DENY);
* an :class:`AclBinding` is one pattern with one entry; an :class:`AclBindingFilter`
  selects bindings for listing and deleting (Confluent v3's query parameters and
  ``kafka-acls --list/--remove``), with ANY and MATCH as Kafka's filters have them.

The decision (:func:`authorize`), as Kafka's ``AclAuthorizer`` makes it:

1. a super user (``super.users``) may do anything;
2. the bindings whose pattern matches the resource are collected; when there are none,
   the answer is ``allow.everyone.if.no.acl.found``;
3. a matching DENY entry for the principal (or ``User:*``), the host (or ``*``) and the
   operation (or ALL) denies: deny wins over any allow;
4. a matching ALLOW entry allows; it may name the operation itself, ALL, or an
   operation that implies it: Read, Write, Delete and Alter imply Describe;
   AlterConfigs implies DescribeConfigs (implication never widens a DENY);
5. otherwise the request is denied.

laketail adds one rule Kafka enforces elsewhere: the coordinators' internal topics
(``__consumer_offsets``, ``__transaction_state``) and the schema registry's
``__schemas`` are read, written, altered or deleted
by super users only, whatever the ACLs say (Describe follows the ACLs).

Everything here is immutable and thread-safe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

from laketail.errors import InvalidRequest
from laketail.security.principal import KafkaPrincipal

WILDCARD = "*"
#: The one name a Cluster resource has (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"
WILDCARD_PRINCIPAL = "User:*"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__schemas"})


class _Named(enum.Enum):
    """Enums parsed the forgiving way Kafka's tools accept them: ``Read``, ``READ``,
    ``read``, ``cluster-action``, ``ClusterAction`` and ``CLUSTER_ACTION`` are one."""

    @classmethod
    def parse(cls, text: object, what: str):
        if isinstance(text, cls):
            return text
        if isinstance(text, str):
            key = text.replace("-", "").replace("_", "").upper()
            for member in cls:
                if member.name.replace("_", "") == key:
                    return member
        names = ", ".join(m.name for m in cls)
        raise InvalidRequest(f"{what} must be one of {names}; got {text!r}")


class ResourceType(_Named):
    ANY = "Any"  # filters only
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"
    SUBJECT = "Subject"  # Confluent Schema Registry's subjects (laketail.schemas)


class PatternType(_Named):
    ANY = "Any"  # filters only: every pattern type
    MATCH = "Match"  # filters only: every binding that applies to the filter's name
    LITERAL = "Literal"
    PREFIXED = "Prefixed"


class AclOperation(_Named):
    ANY = "Any"  # filters only
    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"


class AclPermissionType(_Named):
    ANY = "Any"  # filters only
    DENY = "Deny"
    ALLOW = "Allow"


#: Operations an ALLOW for the key's operation also grants (Kafka's implied operations).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}
#: What only super users may do on an internal topic.
_INTERNAL_OPS = frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER,
                           AclOperation.ALTER_CONFIGS, AclOperation.CREATE})
#: Operations that are valid on each resource type (Kafka's ``AclEntry.supportedOperations``).
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS, AclOperation.ALL}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALL}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE,
                                     AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.ALL}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.ALL}),
    # Confluent RBAC's Subject: Read, Write, Delete; Read/AlterCompatibility as the configs
    ResourceType.SUBJECT: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                     AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.ALL}),
}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern applies to the concrete resource ``(resource_type, name)``."""
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return name.startswith(self.name)  # PREFIXED


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice" or "User:*"
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an entry. Hashable; two equal bindings are one ACL."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    @classmethod
    def of(cls, resource_type: object, name: object, pattern_type: object, principal: object, host: object,
           operation: object, permission: object) -> AclBinding:
        """A binding to store, validated strictly (writing is strict): concrete enums
        (no ANY / MATCH), a parseable principal, a supported operation for the type."""
        rtype = ResourceType.parse(resource_type, "resource_type")
        ptype = PatternType.parse(pattern_type, "pattern_type")
        op = AclOperation.parse(operation, "operation")
        perm = AclPermissionType.parse(permission, "permission")
        if rtype is ResourceType.ANY:
            raise InvalidRequest(
                "an ACL names one resource_type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, SUBJECT), not ANY")
        if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidRequest(f"an ACL's pattern_type is LITERAL or PREFIXED, not {ptype.name}")
        if op is AclOperation.ANY or perm is AclPermissionType.ANY:
            raise InvalidRequest("an ACL names one operation and one permission, not ANY")
        if op not in SUPPORTED_OPERATIONS[rtype]:
            raise InvalidRequest(f"operation {op.name} does not apply to resource type {rtype.name}")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("an ACL's resource_name must be a non-empty string")
        if rtype is ResourceType.CLUSTER and name != CLUSTER_NAME:
            raise InvalidRequest(f"the cluster resource is named {CLUSTER_NAME}, not {name!r}")
        if ptype is PatternType.PREFIXED and name == WILDCARD:
            raise InvalidRequest("a PREFIXED pattern cannot be '*' (use LITERAL '*' for every resource)")
        principal_text = str(KafkaPrincipal.parse(principal))
        if not isinstance(host, str) or not host:
            raise InvalidRequest("an ACL's host must be a non-empty string ('*' for every host)")
        return cls(ResourcePattern(rtype, name, ptype), AccessControlEntry(principal_text, host, op, perm))

    def describe(self) -> str:
        """Kafka's rendering, for logs and the CLI."""
        p, e = self.pattern, self.entry
        return (f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                f"permissionType={e.permission.name}) on ResourcePattern(resourceType={p.resource_type.name}, "
                f"name={p.name}, patternType={p.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings; ``None`` name/principal/host and the ANY enums match anything.
    MATCH as the pattern type selects every binding that would apply to ``name``
    (literal equal, literal ``*`` and prefixes of it), as Kafka's filter does."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        if self.resource_type is not ResourceType.ANY and p.resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.name is not None and not p.matches(p.resource_type, self.name):
                return False
        else:
            if self.pattern_type is not PatternType.ANY and p.pattern_type is not self.pattern_type:
                return False
            if self.name is not None and p.name != self.name:
                return False
        if self.principal is not None and e.principal != self.principal:
            return False
        if self.host is not None and e.host != self.host:
            return False
        if self.operation is not AclOperation.ANY and e.operation is not self.operation:
            return False
        return self.permission is AclPermissionType.ANY or e.permission is self.permission


def _entry_applies(entry: AccessControlEntry, principal: str, host: str) -> bool:
    return entry.principal in (principal, WILDCARD_PRINCIPAL) and entry.host in (host, WILDCARD)


def authorize(bindings: Iterable[AclBinding], principal: KafkaPrincipal, host: str, operation: AclOperation,
              resource_type: ResourceType, name: str, *, super_users: frozenset[str] = frozenset(),
              allow_if_no_acl: bool = False) -> bool:
    """Kafka's decision for one action (see the module docstring for the rules)."""
    who = str(principal)
    if who in super_users:
        return True
    if resource_type is ResourceType.TOPIC and name in INTERNAL_TOPICS and operation in _INTERNAL_OPS:
        return False
    matching = [b.entry for b in bindings if b.pattern.matches(resource_type, name)]
    if not matching:
        return allow_if_no_acl
    for entry in matching:
        if (entry.permission is AclPermissionType.DENY and entry.operation in (operation, AclOperation.ALL)
                and _entry_applies(entry, who, host)):
            return False
    granting = IMPLIED_BY.get(operation, frozenset()) | {operation, AclOperation.ALL}
    return any(
        entry.permission is AclPermissionType.ALLOW and entry.operation in granting and _entry_applies(entry, who, host)
        for entry in matching
    )
