"""Kafka's int8 codes of the ACL enums (``org.apache.kafka.common.acl`` and
``resource``), and the authorized-operations bit sets Metadata and DescribeCluster
answer (KIP-430: bit ``code`` set for each operation the principal may perform)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from laketail.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType

if TYPE_CHECKING:
    from laketail.security.authorizer import Authorizer
    from laketail.security.principal import KafkaPrincipal

Op, R = AclOperation, ResourceType
RESOURCE_TYPES = {1: R.ANY, 2: R.TOPIC, 3: R.GROUP, 4: R.CLUSTER, 5: R.TRANSACTIONAL_ID}
PATTERN_TYPES = {1: PatternType.ANY, 2: PatternType.MATCH, 3: PatternType.LITERAL, 4: PatternType.PREFIXED}
OPERATIONS = {1: Op.ANY, 2: Op.ALL, 3: Op.READ, 4: Op.WRITE, 5: Op.CREATE, 6: Op.DELETE, 7: Op.ALTER,
              8: Op.DESCRIBE, 9: Op.CLUSTER_ACTION, 10: Op.DESCRIBE_CONFIGS, 11: Op.ALTER_CONFIGS,
              12: Op.IDEMPOTENT_WRITE}
PERMISSIONS = {1: AclPermissionType.ANY, 2: AclPermissionType.DENY, 3: AclPermissionType.ALLOW}
#: enum member -> its code
CODE: dict[Any, int] = {**{v: k for k, v in RESOURCE_TYPES.items()}, **{v: k for k, v in PATTERN_TYPES.items()},
                        **{v: k for k, v in OPERATIONS.items()}, **{v: k for k, v in PERMISSIONS.items()}}
#: Kafka's "not asked for" value of an authorized-operations field
NOT_ASKED = -(2 ** 31)
_OPERATIONS_OF = {
    R.CLUSTER: (Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                Op.IDEMPOTENT_WRITE),
    R.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
              Op.ALTER_CONFIGS),
}


def authorized_operations(authorizer: "Authorizer", principal: "KafkaPrincipal", host: str, rtype: ResourceType,
                          name: str = CLUSTER_NAME) -> int:
    """The bit set of the operations ``principal`` may perform on the resource (no
    audit line: asking is not acting)."""
    bits = 0
    for op in _OPERATIONS_OF[rtype]:
        if authorizer.authorize(principal, host, op, rtype, name, audit_denied=False):
            bits |= 1 << CODE[op]
    return bits
