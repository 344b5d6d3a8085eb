"""Who is at the other end of a Kafka connection: TLS, client certificates, SASL.

:class:`ListenerSecurity` is what one Kafka listener's security protocol
(``listener.security.protocol.map``) means for its connections, from the same
settings the HTTP listeners read (docs/architecture.md §11.4):

* ``SSL`` and ``SASL_SSL``: TLS with ``ssl.keystore.certificate.chain`` /
  ``ssl.keystore.key``; client certificates as ``ssl.client.auth`` says (``none``,
  ``requested``, ``required``), verified against ``ssl.truststore.location``.
* ``SSL``: a verified client certificate's subject names the principal through
  ``ssl.principal.mapping.rules`` (a subject no rule maps closes the connection, as
  Kafka fails the handshake); no certificate: ``User:ANONYMOUS``.
* ``SASL_PLAINTEXT`` and ``SASL_SSL``: each connection starts with a
  :class:`~laketail.kafka.sasl.SaslGate`; the SASL exchange names the principal (a
  client certificate on ``SASL_SSL`` does not, as in Kafka).
* ``PLAINTEXT``: ``User:ANONYMOUS``.

A failed authentication is answered after ``connection.failed.authentication.delay.ms``
(Kafka's key and default, 100 ms; KIP-306), as the HTTP listeners answer theirs, and the
connection is then closed: a client guessing passwords waits that long per guess.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING, Any

from laketail.errors import InvalidConfig, SaslAuthenticationFailed
from laketail.kafka.protocol import CloseConnection
from laketail.kafka.sasl import SaslGate
from laketail.security.ssl_principal import subject_name

if TYPE_CHECKING:
    from laketail.config import BrokerSettings
    from laketail.kafka.apis import Session
    from laketail.security.authenticator import Authenticator
    from laketail.security.listeners import Listener

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class ListenerSecurity:
    """One Kafka listener's TLS context and authentication; event loop thread only."""

    def __init__(self, listener: "Listener", settings: "BrokerSettings",
                 authenticator: "Authenticator | None") -> None:
        if (listener.sasl or listener.tls) and authenticator is None:
            raise InvalidConfig(f"listener {listener.name} is {listener.protocol}: it needs an authenticator")
        self.listener = listener
        self.settings = settings
        self.authenticator = authenticator
        self.failure_delay_s = settings.connection_failed_authentication_delay_ms / 1000

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.listener.tls:
            return None
        s = self.settings
        if s.ssl_client_auth not in CLIENT_AUTH:
            raise InvalidConfig(f"ssl.client.auth={s.ssl_client_auth!r}: none, requested or required")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(s.ssl_keystore_certificate_chain, s.ssl_keystore_key)
            if s.ssl_truststore_location:
                context.load_verify_locations(cafile=s.ssl_truststore_location)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfig(f"listener {self.listener.name}: cannot load its TLS key or certificates: "
                                f"{exc}") from exc
        if s.ssl_client_auth != "none" and not s.ssl_truststore_location:
            raise InvalidConfig("ssl.client.auth needs ssl.truststore.location (the CA of client certificates)")
        context.verify_mode = CLIENT_AUTH[s.ssl_client_auth]
        return context

    def open(self, session: "Session", ssl_object: Any) -> SaslGate | None:
        """Set up a new connection's session: its certificate's principal on ``SSL``, its
        SASL gate on ``SASL_*``; :class:`CloseConnection` for an unmapped certificate."""
        if self.listener.sasl:
            assert self.authenticator is not None
            return SaslGate(self.authenticator, session, self.listener.name,
                            reauth_ms=self.settings.connections_max_reauth_ms)
        if ssl_object is not None and self.authenticator is not None:
            subject = (ssl_object.getpeercert() or {}).get("subject")  # {} unless verified
            if subject:
                try:
                    session.principal = self.authenticator.certificate(subject_name(subject))
                except SaslAuthenticationFailed as exc:
                    raise CloseConnection(exc.message) from None
        return None

    async def before_failure_answer(self) -> None:
        if self.failure_delay_s > 0:
            await asyncio.sleep(self.failure_delay_s)
