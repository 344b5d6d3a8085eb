"""Security: who is asking (authentication) and what they may do (authorization).

Authentication turns a connection's proof (a client certificate, HTTP Basic SCRAM
credentials, an OAuth bearer token) into a :class:`~laketail.security.principal.KafkaPrincipal`;
authorization decides with Kafka's ACL model whether that principal, from that host,
may perform an operation on a resource. The gateway attaches the principal to each
request (``request.state.principal``); requests that prove nothing are
:data:`~laketail.security.principal.ANONYMOUS`.
"""
