"""The broker's authorizer: Kafka's ``AclAuthorizer`` over the ``_system/acls`` table.

Role: answer "may this principal, from this host, perform this operation on this
resource" (:meth:`Authorizer.authorize`) with the pure rules of
:mod:`laketail.security.acl`, fast enough for the produce and fetch paths: decisions are
cached per ``(principal, host, operation, resource)`` and the cache is dropped whenever
the bindings change (a local create/delete, or a reload after another broker's change,
found by :meth:`Authorizer.refresh` every ``laketail.acl.refresh.ms``).

Audit (Kafka's ``kafka.authorizer.logger``): every denied action, and every allowed
change of the cluster's state (Create, Delete, Alter, AlterConfigs, and ACL changes)
is a line on the ``laketail.authorizer`` logger, INFO, as ``key=value`` pairs::

    principal=User:bob host=127.0.0.1 operation=WRITE resource=TOPIC:orders decision=DENIED

Settings: authorization is on when ``authorizer.class.name`` names the ACL authorizer
(:data:`AUTHORIZER_CLASSES`); ``super.users`` (``User:admin;User:broker``) may do
anything; ``allow.everyone.if.no.acl.found`` (default false) allows an action on a
resource no ACL matches. With authorization off :meth:`Authorizer.authorize` allows
everything and nothing is cached or logged.

Thread-safety: :meth:`authorize` runs on the event loop; the store is read and written
in worker threads under ``_store_lock``; the bindings and cache are swapped whole, so a
reader sees either the old or the new set.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

from deltalake.exceptions import DeltaError

from laketail.errors import (
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    InvalidConfig,
    LaketailError,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)
from laketail.schemas.errors import SubjectAuthorizationFailed
from laketail.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
    authorize,
)
from laketail.security.acl_store import AclStore
from laketail.security.principal import BROKER, KafkaPrincipal

audit = logging.getLogger("laketail.authorizer")

#: ``authorizer.class.name`` values that turn ACL authorization on (laketail's own and
#: Kafka's, so a ``server.properties`` carried over works unchanged).
AUTHORIZER_CLASSES = frozenset({
    "laketail.security.authorizer.AclAuthorizer",
    "laketail.security.acl.AclAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
})

DENIED_ERRORS: dict[ResourceType, type[LaketailError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailed,
    ResourceType.GROUP: GroupAuthorizationFailed,
    ResourceType.CLUSTER: ClusterAuthorizationFailed,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailed,
    ResourceType.SUBJECT: SubjectAuthorizationFailed,
}
#: Operations whose allowed uses are audited too (they change the cluster).
AUDITED_CHANGES = frozenset({AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER, AclOperation.ALTER_CONFIGS})
_CACHE_MAX = 100_000


def parse_super_users(text: str) -> frozenset[str]:
    """``"User:admin;User:broker"`` -> the principals' names, each checked."""
    return frozenset(str(KafkaPrincipal.parse(p.strip())) for p in text.split(";") if p.strip())


def audit_line(principal: KafkaPrincipal | str, host: str, operation: str, resource: str, allowed: bool,
               detail: str = "") -> None:
    audit.info("principal=%s host=%s operation=%s resource=%s decision=%s%s", principal, host, operation,
               resource, "ALLOWED" if allowed else "DENIED", f" {detail}" if detail else "")


class Authorizer:
    """Authorization for one broker (see the module docstring)."""

    def __init__(self, root: str | Path, class_name: str = "", super_users: str = "",
                 allow_everyone_if_no_acl_found: bool = False, refresh_ms: int = 500) -> None:
        class_name = class_name.strip()
        if class_name and class_name not in AUTHORIZER_CLASSES:
            raise InvalidConfig(f"authorizer.class.name={class_name!r} is not one of {sorted(AUTHORIZER_CLASSES)}")
        self.enabled = bool(class_name)
        # the peer brokers' own principal is always a super user (see principal.BROKER)
        self.super_users = parse_super_users(super_users) | {str(BROKER)}
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self.refresh_ms = refresh_ms
        self.store = AclStore(root)
        self._store_lock = threading.Lock()
        self._cache: dict[tuple, bool] = {}
        #: Grows whenever the bindings change; callers that cache decisions of their own
        #: (the gateway's per-path cache) drop them when it moves.
        self.generation = 0

    @classmethod
    def from_settings(cls, settings) -> Authorizer:
        return cls(settings.data, settings.authorizer_class_name, settings.super_users,
                   settings.allow_everyone_if_no_acl_found, settings.acl_refresh_ms)

    # -- lifecycle (the gateway's lifespan) ----------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self._locked, self.store.open)
        self._invalidate()

    async def run_refresher(self) -> None:
        """Reload the bindings when another broker changed them, forever (cancel to stop)."""
        while True:
            await asyncio.sleep(self.refresh_ms / 1000)
            try:
                await self.refresh()
            except (DeltaError, OSError):  # a storage hiccup: keep the last bindings, try again
                audit.getChild("refresh").warning("could not reload the ACLs", exc_info=True)

    async def refresh(self) -> None:
        if await asyncio.to_thread(self._locked, self.store.reload_if_changed):
            self._invalidate()

    def _invalidate(self) -> None:
        self._cache = {}
        self.generation += 1

    def _locked(self, fn, *args):
        with self._store_lock:
            return fn(*args)

    # -- decisions -----------------------------------------------------------------------------

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return str(principal) in self.super_users

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str = CLUSTER_NAME, *, audit_denied: bool = True) -> bool:
        """Whether the action is allowed; ``audit_denied=False`` for listings, where a
        resource the principal may not Describe is left out rather than refused."""
        if not self.enabled:
            return True
        key = (principal, host, operation, resource_type, name)
        allowed = self._cache.get(key)
        if allowed is None:
            allowed = authorize(self.store.bindings, principal, host, operation, resource_type, name,
                                super_users=self.super_users, allow_if_no_acl=self.allow_if_no_acl)
            if len(self._cache) >= _CACHE_MAX:
                self._cache = {}
            self._cache[key] = allowed
        if (not allowed and audit_denied) or (allowed and operation in AUDITED_CHANGES):
            audit_line(principal, host, operation.name, f"{resource_type.name}:{name}", allowed)
        return allowed

    def check(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
              resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        """Raise the resource type's ``*_AUTHORIZATION_FAILED`` unless allowed."""
        if not self.authorize(principal, host, operation, resource_type, name):
            what = "the cluster" if resource_type is ResourceType.CLUSTER else f"{resource_type.value} '{name}'"
            raise DENIED_ERRORS[resource_type](
                f"{principal} is not authorized to {operation.value} {what}")

    # -- ACL administration (Confluent v3 /acls, laketail acls) --------------------------------

    def matching(self, selector: AclBindingFilter) -> list[AclBinding]:
        return sorted((b for b in self.store.bindings if selector.matches(b)), key=_order)

    async def create(self, bindings: list[AclBinding], principal: KafkaPrincipal, host: str) -> None:
        new = frozenset(bindings)
        await asyncio.to_thread(self._locked, self.store.mutate, lambda current: current | new)
        self._invalidate()
        for b in bindings:
            audit_line(principal, host, "CREATE_ACLS", b.describe(), True)

    async def delete(self, selector: AclBindingFilter, principal: KafkaPrincipal, host: str) -> list[AclBinding]:
        removed: list[AclBinding] = []

        def change(current: frozenset[AclBinding]) -> frozenset[AclBinding]:
            removed[:] = [b for b in current if selector.matches(b)]
            return current - frozenset(removed)

        await asyncio.to_thread(self._locked, self.store.mutate, change)
        self._invalidate()
        for b in removed:
            audit_line(principal, host, "DELETE_ACLS", b.describe(), True)
        return sorted(removed, key=_order)


#: The name ``authorizer.class.name`` gives it.
AclAuthorizer = Authorizer


def _order(b: AclBinding) -> tuple:
    return (b.pattern.resource_type.name, b.pattern.name, b.pattern.pattern_type.name, b.entry.principal,
            b.entry.host, b.entry.operation.name, b.entry.permission.name)
