"""Kafka's ACL decision table, as pure unit tests of :mod:`laketail.security.acl`."""

from __future__ import annotations

import pytest

from laketail.errors import InvalidRequest
from laketail.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    ResourceType,
    authorize,
)
from laketail.security.principal import KafkaPrincipal

ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
Op, R = AclOperation, ResourceType


def acl(principal, op, rtype, name, pattern="LITERAL", permission="ALLOW", host="*") -> AclBinding:
    return AclBinding.of(rtype, name, pattern, principal, host, op, permission)


def decide(bindings, op, rtype, name, principal=ALICE, host="10.0.0.1", **kw) -> bool:
    return authorize(bindings, principal, host, op, rtype, name, **kw)


@pytest.mark.parametrize("bindings, op, rtype, name, expected", [
    # literal, prefixed and the * wildcard
    ([acl("User:alice", "READ", "TOPIC", "orders")], Op.READ, R.TOPIC, "orders", True),
    ([acl("User:alice", "READ", "TOPIC", "orders")], Op.READ, R.TOPIC, "orders-eu", False),
    ([acl("User:alice", "READ", "TOPIC", "orders", "PREFIXED")], Op.READ, R.TOPIC, "orders-eu", True),
    ([acl("User:alice", "READ", "TOPIC", "orders", "PREFIXED")], Op.READ, R.TOPIC, "order", False),
    ([acl("User:alice", "READ", "TOPIC", "*")], Op.READ, R.TOPIC, "anything", True),
    # the resource type must match
    ([acl("User:alice", "READ", "GROUP", "orders")], Op.READ, R.TOPIC, "orders", False),
    # the operation: exact, All, implied
    ([acl("User:alice", "WRITE", "TOPIC", "orders")], Op.READ, R.TOPIC, "orders", False),
    ([acl("User:alice", "ALL", "TOPIC", "orders")], Op.DELETE, R.TOPIC, "orders", True),
    ([acl("User:alice", "READ", "TOPIC", "orders")], Op.DESCRIBE, R.TOPIC, "orders", True),
    ([acl("User:alice", "WRITE", "TOPIC", "orders")], Op.DESCRIBE, R.TOPIC, "orders", True),
    ([acl("User:alice", "DELETE", "TOPIC", "orders")], Op.DESCRIBE, R.TOPIC, "orders", True),
    ([acl("User:alice", "ALTER", "TOPIC", "orders")], Op.DESCRIBE, R.TOPIC, "orders", True),
    ([acl("User:alice", "CREATE", "TOPIC", "orders")], Op.DESCRIBE, R.TOPIC, "orders", False),
    ([acl("User:alice", "DESCRIBE", "TOPIC", "orders")], Op.READ, R.TOPIC, "orders", False),
    ([acl("User:alice", "ALTER_CONFIGS", "TOPIC", "orders")], Op.DESCRIBE_CONFIGS, R.TOPIC, "orders", True),
    ([acl("User:alice", "DESCRIBE_CONFIGS", "TOPIC", "orders")], Op.ALTER_CONFIGS, R.TOPIC, "orders", False),
    ([acl("User:alice", "ALTER_CONFIGS", "TOPIC", "orders")], Op.DESCRIBE, R.TOPIC, "orders", False),
    # the principal: exact or User:*
    ([acl("User:bob", "READ", "TOPIC", "orders")], Op.READ, R.TOPIC, "orders", False),
    ([acl("User:*", "READ", "TOPIC", "orders")], Op.READ, R.TOPIC, "orders", True),
    # the host: exact or *
    ([acl("User:alice", "READ", "TOPIC", "orders", host="10.0.0.1")], Op.READ, R.TOPIC, "orders", True),
    ([acl("User:alice", "READ", "TOPIC", "orders", host="10.0.0.2")], Op.READ, R.TOPIC, "orders", False),
    # deny wins, on any pattern that matches; a deny of All denies everything
    ([acl("User:alice", "READ", "TOPIC", "orders", "PREFIXED"),
      acl("User:alice", "READ", "TOPIC", "orders-secret", permission="DENY")], Op.READ, R.TOPIC, "orders-secret",
     False),
    ([acl("User:alice", "ALL", "TOPIC", "*"),
      acl("User:*", "ALL", "TOPIC", "pay", "PREFIXED", permission="DENY")], Op.WRITE, R.TOPIC, "payments", False),
    ([acl("User:alice", "READ", "TOPIC", "orders"),
      acl("User:alice", "READ", "TOPIC", "orders", permission="DENY", host="10.0.0.1")], Op.READ, R.TOPIC, "orders",
     False),
    # a deny never grows by implication: denying Read leaves Describe to the allows
    ([acl("User:alice", "WRITE", "TOPIC", "orders"),
      acl("User:alice", "READ", "TOPIC", "orders", permission="DENY")], Op.DESCRIBE, R.TOPIC, "orders", True),
    # a deny for somebody else or another host does not apply
    ([acl("User:alice", "READ", "TOPIC", "orders"),
      acl("User:bob", "READ", "TOPIC", "orders", permission="DENY"),
      acl("User:alice", "READ", "TOPIC", "orders", permission="DENY", host="10.9.9.9")], Op.READ, R.TOPIC, "orders",
     True),
    # cluster and transactional id resources
    ([acl("User:alice", "CREATE", "CLUSTER", "kafka-cluster")], Op.CREATE, R.CLUSTER, "kafka-cluster", True),
    ([acl("User:alice", "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster")], Op.CLUSTER_ACTION, R.CLUSTER,
     "kafka-cluster", False),
    ([acl("User:alice", "WRITE", "TRANSACTIONAL_ID", "app-", "PREFIXED")], Op.WRITE, R.TRANSACTIONAL_ID, "app-1",
     True),
    ([acl("User:alice", "WRITE", "TRANSACTIONAL_ID", "app-", "PREFIXED")], Op.DESCRIBE, R.TRANSACTIONAL_ID, "app-1",
     True),
])
def test_decision_table(bindings, op, rtype, name, expected):
    assert decide(bindings, op, rtype, name) is expected


def test_no_acl_for_the_resource_is_allow_everyone_if_no_acl_found():
    elsewhere = [acl("User:bob", "READ", "TOPIC", "other")]
    assert decide(elsewhere, Op.READ, R.TOPIC, "orders") is False
    assert decide(elsewhere, Op.READ, R.TOPIC, "orders", allow_if_no_acl=True) is True
    # once any ACL matches the resource, the setting no longer applies (Kafka's rule)
    bobs = [acl("User:bob", "READ", "TOPIC", "orders")]
    assert decide(bobs, Op.READ, R.TOPIC, "orders", allow_if_no_acl=True) is False


def test_super_users_may_do_anything_even_against_a_deny():
    denied = [acl("User:*", "ALL", "TOPIC", "*", permission="DENY")]
    assert decide(denied, Op.WRITE, R.TOPIC, "orders", super_users=frozenset({"User:alice"})) is True
    assert decide(denied, Op.WRITE, R.TOPIC, "orders", principal=BOB, super_users=frozenset({"User:alice"})) is False


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALTER_CONFIGS])
def test_internal_topics_are_for_super_users_only(op):
    everything = [acl("User:alice", "ALL", "TOPIC", "*")]
    for name in ("__consumer_offsets", "__transaction_state"):
        assert decide(everything, op, R.TOPIC, name, allow_if_no_acl=True) is False
        assert decide([], op, R.TOPIC, name, super_users=frozenset({"User:alice"})) is True
    assert decide(everything, Op.DESCRIBE, R.TOPIC, "__consumer_offsets") is True


@pytest.mark.parametrize("fields, message", [
    (("ANY", "t", "LITERAL", "User:a", "*", "READ", "ALLOW"), "not ANY"),
    (("TOPIC", "t", "MATCH", "User:a", "*", "READ", "ALLOW"), "LITERAL or PREFIXED"),
    (("TOPIC", "t", "LITERAL", "alice", "*", "READ", "ALLOW"), "<type>:<name>"),
    (("TOPIC", "t", "LITERAL", "User:a", "*", "ANY", "ALLOW"), "not ANY"),
    (("TOPIC", "t", "LITERAL", "User:a", "*", "READ", "MAYBE"), "permission must be one of"),
    (("TOPIC", "t", "LITERAL", "User:a", "*", "CLUSTER_ACTION", "ALLOW"), "does not apply"),
    (("GROUP", "g", "LITERAL", "User:a", "*", "WRITE", "ALLOW"), "does not apply"),
    (("CLUSTER", "mine", "LITERAL", "User:a", "*", "CREATE", "ALLOW"), "kafka-cluster"),
    (("TOPIC", "", "LITERAL", "User:a", "*", "READ", "ALLOW"), "non-empty"),
    (("TOPIC", "*", "PREFIXED", "User:a", "*", "READ", "ALLOW"), "PREFIXED pattern cannot be"),
    (("TOPIC", "t", "LITERAL", "User:a", "", "READ", "ALLOW"), "host"),
])
def test_bindings_are_validated_strictly(fields, message):
    with pytest.raises(InvalidRequest, match=message):
        AclBinding.of(*fields)


def test_names_parse_as_kafka_tools_write_them():
    b = AclBinding.of("Topic", "t", "prefixed", "User:a", "*", "describe-configs", "Allow")
    assert (b.pattern.resource_type, b.pattern.pattern_type, b.entry.operation) == (
        R.TOPIC, PatternType.PREFIXED, Op.DESCRIBE_CONFIGS)
    b = AclBinding.of("transactional-id", "x", "LITERAL", "User:a", "*", "write", "DENY")
    assert (b.pattern.resource_type, b.entry.operation) == (R.TRANSACTIONAL_ID, Op.WRITE)


def test_filters_any_and_match():
    lit = acl("User:alice", "READ", "TOPIC", "orders")
    pre = acl("User:alice", "READ", "TOPIC", "ord", "PREFIXED")
    star = acl("User:bob", "WRITE", "TOPIC", "*")
    grp = acl("User:alice", "READ", "GROUP", "orders")
    every = [lit, pre, star, grp]
    pick = lambda f: {b for b in every if f.matches(b)}  # noqa: E731
    assert pick(AclBindingFilter()) == set(every)
    assert pick(AclBindingFilter(R.TOPIC, "orders")) == {lit}  # ANY pattern type: the exact name only
    assert pick(AclBindingFilter(R.TOPIC, "orders", PatternType.MATCH)) == {lit, pre, star}
    assert pick(AclBindingFilter(R.TOPIC, "ord", PatternType.PREFIXED)) == {pre}
    assert pick(AclBindingFilter(principal="User:bob")) == {star}
    assert pick(AclBindingFilter(operation=Op.READ, resource_type=R.GROUP)) == {grp}
