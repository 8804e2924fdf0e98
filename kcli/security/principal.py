"""Who a connection is: Kafka's principals and its `ssl.principal.mapping.rules`.

Every connection carries a principal (`ConnectionInfo.principal`): `User:ANONYMOUS` on PLAINTEXT and
on TLS without a client certificate; with one, the certificate's subject (RFC 2253, as Java's
X500Principal.getName gives it) mapped by the rules, as Kafka's DefaultKafkaPrincipalBuilder does.
SASL sets it from the authenticated name instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kcli.errors import KcliError

ANONYMOUS = "User:ANONYMOUS"
"""KafkaPrincipal.ANONYMOUS."""
USER_TYPE = "User"


class PrincipalMappingError(KcliError):
    """`ssl.principal.mapping.rules` that do not parse, or that no rule matches a subject."""


# Kafka's SslPrincipalMapper.RULE_PATTERN, RULE_SPLITTER and RULE_PARSER.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(lambda m: _expand(self.replacement, m), name)
        if self.lower:
            return result.lower()
        return result.upper() if self.upper else result


class SslPrincipalMapper:
    """`ssl.principal.mapping.rules`: DEFAULT, or RULE:pattern/replacement/[LU] entries, first match wins."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        self.rules = [_parse(text) for text in _split(rules if rules is not None else "DEFAULT")]
        self.rules = [rule for rule in self.rules if rule is not None]

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)  # type: ignore[union-attr]
            if mapped is not None:
                return mapped
        raise PrincipalMappingError(
            f"no rule of ssl.principal.mapping.rules applies to the certificate subject {distinguished_name}."
        )

    def principal(self, der_certificate: bytes | None) -> str:
        """The principal of a peer that presented `der_certificate` (None: no certificate)."""
        if not der_certificate:
            return ANONYMOUS
        from cryptography import x509  # here: the configuration imports this module, the CLI starts fast

        subject = x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()
        return f"{USER_TYPE}:{self.name(subject)}"


def _split(rules: str) -> list[str]:
    return [match.group(1) for match in _SPLITTER.finditer(rules.strip()) if match.group(1) is not None]


def _parse(rule: str) -> _Rule | None:
    match = _PARSER.match(rule)
    if match is None or match.end() != len(rule):
        rest = rule if match is None else rule[match.end() :]
        raise PrincipalMappingError(
            f"invalid rule {rule!r} in ssl.principal.mapping.rules (unmatched {rest!r})."
        )
    if match.group(1) is not None:
        return _Rule(None)
    if match.group(2) is not None:
        try:
            pattern = re.compile(match.group(2))
        except re.error as exc:
            raise PrincipalMappingError(
                f"invalid pattern {match.group(2)!r} in ssl.principal.mapping.rules: {exc}."
            ) from None
        flag = match.group(6)
        return _Rule(pattern, match.group(4), lower=flag == "L", upper=flag == "U")
    return None  # empty rules are ignored, as in Kafka


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Java's Matcher replacement syntax: `$n` is group n (as many digits as still name a group), `\\x`
    is x; a `$n` naming no group stays literal, as Kafka's escapeLiteralBackReferences makes it."""
    groups = match.re.groups
    out: list[str] = []
    i, end = 0, len(replacement)
    while i < end:
        char = replacement[i]
        if char == "\\" and i + 1 < end:
            out.append(replacement[i + 1])
            i += 2
        elif (
            char == "$" and i + 1 < end and replacement[i + 1].isdigit() and int(replacement[i + 1]) <= groups
        ):
            index, i = int(replacement[i + 1]), i + 2
            while i < end and replacement[i].isdigit() and index * 10 + int(replacement[i]) <= groups:
                index, i = index * 10 + int(replacement[i]), i + 1
            out.append(match.group(index) or "")
        else:
            out.append(char)
            i += 1
    return "".join(out)
