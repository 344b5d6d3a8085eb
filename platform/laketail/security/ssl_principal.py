"""A client certificate's subject as a principal: Kafka's ``ssl.principal.mapping.rules``.

The subject is written as RFC 2253 writes a distinguished name, most specific part
first (``CN=alice,OU=eng,O=acme``), which is what Kafka's ``DEFAULT`` rule yields:
``User:CN=alice,OU=eng,O=acme``. Rules are tried in order; the first whose pattern
matches the whole name gives the principal's name::

    RULE:^CN=(.*?),OU=(.*?)$/$1/L, RULE:^CN=(.*?)$/$1/, DEFAULT

``$1`` refers to a group; a trailing ``/L`` or ``/U`` lower- or upper-cases the
result. A subject no rule matches is refused (Kafka fails the handshake likewise).

Pure; a compiled :class:`PrincipalMapper` is immutable and thread-safe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from laketail.errors import InvalidConfig

_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")
_ATTRS = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
          "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
          "emailAddress": "EMAILADDRESS", "domainComponent": "DC", "userId": "UID",
          "streetAddress": "STREET"}


def subject_name(subject: tuple) -> str:
    """``ssl.SSLSocket.getpeercert()["subject"]`` as an RFC 2253 name."""
    rdns = []
    for rdn in reversed(subject):
        parts = []
        for attr, value in rdn:
            escaped = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
            parts.append(f"{_ATTRS.get(attr, attr)}={escaped}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


class PrincipalMapper:
    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = _parse(rules)

    def name_for(self, distinguished_name: str) -> str | None:
        """The principal name for a subject, or None when no rule matches it."""
        for rule in self.rules:
            if rule.pattern is None:
                return distinguished_name
            found = rule.pattern.fullmatch(distinguished_name)
            if found is None:
                continue
            out = found.expand(rule.replacement)
            return out.lower() if rule.case == "L" else out.upper() if rule.case == "U" else out
        return None


def _parse(text: str) -> list[_Rule]:
    text = text.strip() or "DEFAULT"
    rules, pos = [], 0
    while pos < len(text):
        found = _RULE.match(text, pos)
        if found is None or found.end() == pos:
            raise InvalidConfig(f"ssl.principal.mapping.rules: cannot read a rule at {text[pos:pos + 40]!r}")
        if found.group(1):
            rules.append(_Rule(None))
        else:
            try:
                pattern = re.compile(found.group(2).replace("\\/", "/"))
            except re.error as exc:
                raise InvalidConfig(f"ssl.principal.mapping.rules: bad pattern {found.group(2)!r}: {exc}") from exc
            replacement = re.sub(r"\$(\d)", r"\\g<\1>", found.group(3).replace("\\/", "/"))
            rules.append(_Rule(pattern, replacement, found.group(4)))
        pos = found.end()
    return rules
