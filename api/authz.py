"""Authorization at the gateway's edge: one middleware reads the route's entry in
:mod:`laketail.api.acl_rules` and asks the broker's
:class:`~laketail.security.authorizer.Authorizer` before anything else runs.

:class:`Authorization` is a pure ASGI middleware outside the coordinator proxy and the
hot produce/fetch dispatch, so every request -- routed by FastAPI, matched by
:mod:`laketail.api.hot_routes`, or proxied to the controller -- is checked once, here.
It is installed only when authorization is on (``authorizer.class.name`` set): with it
off the gateway runs exactly as before. Each request is decided on what the route will
execute (the path parameters of the route's own pattern; a produce's producer parsed
once, by :func:`laketail.api.deps.producer_params`, and handed to the route); the
authorizer caches each permission's answer under the whole question, so a produce or
fetch pays a cached route match and a few dictionary lookups.

Routes whose resource is in the body (commits, AddPartitionsToTxn, InitProducerId,
CreateTopics) check it themselves with :func:`check`; listings keep what
:func:`may_describe` allows. Both use the principal this middleware settled on.

**The principal of a proxied request.** A broker that proxies a coordinator request
to the controller checks it here first (this middleware is outside the proxy); the
controller checks it again with the client's principal, which the listener's authentication
takes from a peer broker's forwarding headers (only a peer broker may forward one).
"""

from __future__ import annotations

from typing import Any, Iterable

from starlette.requests import HTTPConnection, Request
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from laketail.api.acl_rules import Need, Rule, rule_for
from laketail.api.deps import PRODUCER_STATE_KEY, producer_params
from laketail.api.errors import error_response
from laketail.api.principal import host_of, principal_of
from laketail.coordinator.transactions import SINK_PREFIX
from laketail.errors import ClusterAuthorizationFailed, LaketailError
from laketail.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from laketail.security.authorizer import Authorizer
from laketail.security.principal import ANONYMOUS, KafkaPrincipal

_STATE_KEY = "laketail.authz"


def walk_routes(routes: Iterable[Any]) -> list[Any]:
    """Every route, looking into included routers (the gateway includes them without a prefix)."""
    found = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            found.extend(walk_routes(inner.routes))
        else:
            found.append(route)
    return found


def route_key(route: Any, method: str) -> str:
    return f"MOUNT {route.path}" if isinstance(route, Mount) else f"{method} {route.path}"


class _Entry:
    __slots__ = ("methods", "regex", "rule", "key")

    def __init__(self, route: Any, method: str, rule: Rule | None) -> None:
        self.methods = None if isinstance(route, Mount) else {method}
        self.regex = route.path_regex
        self.rule = rule
        self.key = route_key(route, method)


def acting(conn: HTTPConnection) -> tuple[KafkaPrincipal, str]:
    """The principal and host a request is authorized as (set by :class:`Authorization`)."""
    found = conn.scope.get("state", {}).get(_STATE_KEY)
    return found if found is not None else (principal_of(conn), host_of(conn))


def authorizer_of(conn: HTTPConnection) -> Authorizer:
    return conn.app.state.authorizer


def check(request: Request, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
    """An in-handler check (the resource came in the body); no-op with authorization off."""
    authorizer = authorizer_of(request)
    if authorizer.enabled:
        principal, host = acting(request)
        authorizer.check(principal, host, operation, resource_type, name)


def may(request: Request, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
    """Whether the request may (for rules with alternatives); a denial here is not audited."""
    authorizer = authorizer_of(request)
    if not authorizer.enabled:
        return True
    principal, host = acting(request)
    return authorizer.authorize(principal, host, operation, resource_type, name, audit_denied=False)


def may_describe(request: Request, resource_type: ResourceType, name: str) -> bool:
    """Whether a listing shows ``name`` (Describe, never audited as a denial)."""
    authorizer = authorizer_of(request)
    if not authorizer.enabled:
        return True
    principal, host = acting(request)
    return authorizer.authorize(principal, host, AclOperation.DESCRIBE, resource_type, name, audit_denied=False)


def check_auto_create(authorizer: Authorizer, principal: KafkaPrincipal, host: str, topic: str) -> None:
    """Kafka's rule for creating a topic on the fly (a produce, or a metadata request that
    allows auto-creation): Create on the cluster or on the topic, else
    TOPIC_AUTHORIZATION_FAILED and the topic is not created."""
    if not authorizer.authorize(principal, host, AclOperation.CREATE, ResourceType.CLUSTER, audit_denied=False):
        authorizer.check(principal, host, AclOperation.CREATE, ResourceType.TOPIC, topic)


def check_may_auto_create(request: Request, topic: str) -> None:
    """:func:`check_auto_create` for an in-handler auto-creation (a v2 subscription, a
    metadata request); no-op with authorization off. Call it only when the topic does not
    exist and the broker would create it."""
    authorizer = authorizer_of(request)
    if authorizer.enabled:
        principal, host = acting(request)
        check_auto_create(authorizer, principal, host, topic)


def describable(request: Request, topics: Iterable[str]) -> set[str]:
    """The topics among ``topics`` the principal may Describe, as Kafka filters an
    OffsetFetch answer (never audited as denials)."""
    return {t for t in set(topics) if may_describe(request, ResourceType.TOPIC, t)}


def resource_name(need: Need, params: dict[str, str]) -> str:
    """The resource a need names in this request. A Spark sink's session (transactional
    id ``__sink:<sink_id>:<batch>:<n>``, made by the coordinator) is the sink's resource:
    Write on the TransactionalId ``<sink_id>`` covers the sink and all its sessions."""
    if need.param is None:
        return CLUSTER_NAME
    name = params[need.param]
    if need.resource_type is ResourceType.TRANSACTIONAL_ID and name.startswith(SINK_PREFIX):
        return name[len(SINK_PREFIX):].rsplit(":", 2)[0]
    return name


#: At most this many (method, path) route matches are kept (then the table starts over).
_MATCHES_MAX = 10_000


class Authorization:
    """The gateway's authorization middleware (see the module docstring).

    Every request is decided afresh: no decision outlives the request it was made for.
    What is kept is the route a (method, path) matches, which depends on the route table
    alone; each permission's answer comes from :meth:`Authorizer.authorize`, whose cache
    holds the whole question (principal, host, operation, resource type and name) and is
    emptied by every ACL change. Whether a produce would create its topic is asked on
    every produce."""

    def __init__(self, app: ASGIApp, fastapi_app: Any, authorizer: Authorizer) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        self.authorizer = authorizer
        self._entries: list[_Entry] | None = None
        self._matches: dict[tuple[str, str], tuple[_Entry, dict[str, str]] | None] = {}

    def _build(self) -> list[_Entry]:
        from laketail.api.hot_routes import HOT_ENDPOINTS

        hot: list[_Entry] = []
        rest: list[_Entry] = []
        for route in walk_routes(self.fastapi_app.routes):
            methods = ["*"] if isinstance(route, Mount) else sorted(getattr(route, "methods", None) or [])
            for method in methods:
                lookup = "GET" if method == "HEAD" else method
                rule = rule_for("MOUNT", route.path) if method == "*" else rule_for(lookup, route.path)
                entry = _Entry(route, method, rule)
                (hot if getattr(route, "endpoint", None) in HOT_ENDPOINTS else rest).append(entry)
        return hot + rest  # produce and fetch are found first

    def _match(self, method: str, path: str) -> tuple[_Entry, dict[str, str]] | None:
        key = (method, path)
        try:
            return self._matches[key]
        except KeyError:
            pass
        if self._entries is None:
            self._entries = self._build()
        found: tuple[_Entry, dict[str, str]] | None = None
        for entry in self._entries:
            if entry.methods is not None and method not in entry.methods:
                continue
            hit = entry.regex.match(path)
            if hit is not None:
                found = entry, hit.groupdict()
                break
        if len(self._matches) >= _MATCHES_MAX:
            self._matches = {}
        self._matches[key] = found
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        principal = state.get("principal")  # what authentication left, as principal_of reads it
        if not isinstance(principal, KafkaPrincipal):
            principal = ANONYMOUS
        client = scope.get("client")
        host = client[0] if client else "*"  # host_of
        state[_STATE_KEY] = (principal, host)
        try:
            self.decide(scope, principal, host)
        except LaketailError as err:
            metrics = getattr(self.fastapi_app.state, "metrics", None)
            if metrics is not None:
                metrics.count_error(err)  # laketail_request_errors_total{error="TOPIC_AUTHORIZATION_FAILED"}, ...
            await error_response(err, scope["path"])(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def decide(self, scope: Scope, principal: KafkaPrincipal, host: str) -> None:
        """Raise the refusal, if any, of this request by this principal from this host.
        What a route's rule reads of the request it reads parsed, as the route does: path
        parameters from the route's own pattern, a produce's producer from
        :func:`~laketail.api.deps.producer_params`, whose result the route then executes."""
        matched = self._match(scope["method"], scope["path"])
        if matched is None:
            return  # no such route: 404/405 follow, nothing to protect
        entry, params = matched
        rule = entry.rule
        if rule is None:
            if self.authorizer.is_super_user(principal):
                return
            raise ClusterAuthorizationFailed(f"route {entry.key} has no entry in the ACL table; super users only")
        if rule.kind != "checked":
            return
        authorizer = self.authorizer
        decisions = []
        for need in rule.needs:
            name = resource_name(need, params)
            if rule.any_of:
                decisions.append(authorizer.authorize(principal, host, need.operation, need.resource_type, name))
            else:
                authorizer.check(principal, host, need.operation, need.resource_type, name)
        if rule.any_of and not any(decisions):
            first = rule.needs[0]
            authorizer.check(principal, host, first.operation, first.resource_type, resource_name(first, params))
        if rule.produce:
            self._authorize_produce(scope, params["topic"], principal, host)

    def _authorize_produce(self, scope: Scope, topic: str, principal: KafkaPrincipal, host: str) -> None:
        """What a produce needs beyond Write on the topic: Create (on the cluster or the
        topic) when it would auto-create the topic, as Kafka's auto-creation requires;
        IdempotentWrite on the cluster for an idempotent batch; Write on the producer's
        transactional id for a transactional one. The producer is parsed once, here, and
        left in the request's state for the route (:func:`~laketail.api.deps.producer_of`)."""
        authorizer = self.authorizer
        if self.fastapi_app.state.broker.would_auto_create(topic):
            check_auto_create(authorizer, principal, host, topic)
        producer = producer_params(scope["query_string"])  # INVALID_REQUEST for an ambiguous spelling
        scope["state"][PRODUCER_STATE_KEY] = producer
        if producer is None:
            return
        if producer.transactional:
            self._authorize_transactional(producer.producer_id, principal, host)
        else:
            authorizer.check(principal, host, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)

    def _authorize_transactional(self, producer_id: int, principal: KafkaPrincipal, host: str) -> None:
        """A transactional batch adds its partition to the producer's transaction, so it needs
        Write on that transactional id, as Kafka's transactional produce does. A producer id the
        coordinator here does not know passes: this broker proxies the request to the
        controller, which checks it again, and the coordinator refuses an unknown producer id."""
        tid = self.fastapi_app.state.services.transactions.transactional_id_of(producer_id)
        if tid is not None:
            name = resource_name(Need(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "tid"), {"tid": tid})
            self.authorizer.check(principal, host, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, name)
