"""SASL/OAUTHBEARER (RFC 7628) with Kafka's unsecured JWS tokens (`alg: none`).

The client sends `n,[a=<authzid>],\\x01auth=Bearer <token>[\\x01<key>=<value>...]\\x01\\x01`. Its token is
either made here from the JAAS options (Kafka's OAuthBearerUnsecuredLoginCallbackHandler:
unsecuredLoginStringClaim_sub, unsecuredLoginLifetimeSeconds, unsecuredLogin{String,Number,List}Claim_*,
unsecuredLoginExtension_*) or fetched from a token endpoint (`kcli.security.sasl.token_endpoint`).
The broker validates unsecured tokens by Kafka's OAuthBearerUnsecuredValidatorCallbackHandler rules;
a bad token gets the RFC 7628 JSON error as challenge, the client answers `\\x01`, and the broker
fails the authentication with that JSON as message.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kcli.security.sasl import SaslAuthenticationError, SaslCredentialError, SaslError

log = logging.getLogger("kcli.broker")

MECHANISM = "OAUTHBEARER"
SEPARATOR = "\x01"
RESERVED_CLAIMS = ("iat", "exp")
DEFAULT_LIFETIME_SECONDS = 3600

_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_INITIAL_RESPONSE = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KEY}={_VALUE}\x01)*)\x01"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


@dataclass(frozen=True)
class Token:
    """A bearer token and what the client knows of it (its expiry drives re-login)."""

    value: str = field(repr=False)
    principal: str
    lifetime_ms: int | None
    """Epoch ms at which it expires, when known."""
    scope: tuple[str, ...] = ()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_json(text: str) -> dict[str, object]:
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError):
        raise IllegalToken("malformed JSON") from None
    if not isinstance(value, dict):
        raise IllegalToken("malformed JSON")
    return value


def _list_claim(value: str) -> list[str]:
    """Kafka's listJsonText: the first character is the delimiter (`,a,b` -> [a, b])."""
    if len(value) <= 1:
        return []
    parts = value[1:].split(value[0])
    while parts and parts[-1] == "":  # Java's String.split drops trailing empty strings
        parts.pop()
    return parts


def unsecured_token(options: Mapping[str, str], now_ms: int | None = None) -> Token:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler: an `alg: none` JWS from the JAAS options."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "").strip() or "sub"
    scope_claim = options.get("unsecuredLoginScopeClaimName", "").strip() or "scope"
    try:
        lifetime = int(options.get("unsecuredLoginLifetimeSeconds", DEFAULT_LIFETIME_SECONDS))
    except ValueError:
        raise SaslError("unsecuredLoginLifetimeSeconds must be a whole number of seconds.") from None
    claims: dict[str, object] = {"exp": now / 1000 + lifetime, "iat": now / 1000}
    for key, value in options.items():
        for prefix, convert in (
            ("unsecuredLoginStringClaim_", str),
            ("unsecuredLoginNumberClaim_", float),
            ("unsecuredLoginListClaim_", _list_claim),
        ):
            if key.startswith(prefix) and len(key) > len(prefix):
                name = key[len(prefix) :]
                if name in RESERVED_CLAIMS:
                    raise SaslError(f"Cannot explicitly set the '{name}' claim")
                try:
                    claims[name] = convert(value)  # type: ignore[operator]
                except ValueError:
                    raise SaslError(f"JAAS option {key} must be a number.") from None
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise SaslError(
            f"OAUTHBEARER needs the JAAS option unsecuredLoginStringClaim_{principal_claim} (the principal)."
        )
    header = json.dumps({"alg": "none"}, separators=(",", ":")).encode()
    body = json.dumps(claims, separators=(",", ":")).encode()
    scope = claims.get(scope_claim)
    scopes = tuple(scope) if isinstance(scope, list) else tuple(str(scope).split()) if scope else ()
    return Token(f"{_b64url(header)}.{_b64url(body)}.", principal, int(now + lifetime * 1000), scopes)


def extensions_from_jaas(options: Mapping[str, str]) -> dict[str, str]:
    """unsecuredLoginExtension_<key>=<value> (Kafka's SaslExtensionsCallback), checked as Kafka checks them."""
    prefix = "unsecuredLoginExtension_"
    extensions = {k[len(prefix) :]: v for k, v in options.items() if k.startswith(prefix)}
    for key, value in extensions.items():
        if key == "auth" or not re.fullmatch(_KEY, key):
            raise SaslError(f"Extension name {key} is invalid")
        if not re.fullmatch(_VALUE, value):
            raise SaslError(f"Extension value for extension {key} is invalid")
    return extensions


def client_initial_response(
    token: str, extensions: Mapping[str, str] | None = None, authzid: str = ""
) -> bytes:
    """OAuthBearerClientInitialResponse.toBytes."""
    ext = "".join(f"{SEPARATOR}{k}={v}" for k, v in (extensions or {}).items())
    head = f"a={authzid}" if authzid else ""
    return f"n,{head},{SEPARATOR}auth=Bearer {token}{ext}{SEPARATOR}{SEPARATOR}".encode()


class OAuthBearerClient:
    mechanism = MECHANISM

    def __init__(self, token: Token, extensions: Mapping[str, str] | None = None) -> None:
        self.token = token
        self._extensions = dict(extensions or {})
        self._complete = False
        self._error: str | None = None

    def __repr__(self) -> str:
        return f"OAuthBearerClient(principal={self.token.principal!r})"

    def initial_response(self) -> bytes:
        return client_initial_response(self.token.value, self._extensions)

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """An empty challenge: accepted. Otherwise the server's JSON error, acknowledged with `\\x01`."""
        if not challenge:
            self._complete = True
            return None
        self._error = challenge.decode("utf-8", "replace")
        return SEPARATOR.encode()

    @property
    def complete(self) -> bool:
        return self._complete


class IllegalToken(Exception):
    """Kafka's OAuthBearerIllegalTokenException; `scope` set for an insufficient scope."""

    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope


@dataclass(frozen=True)
class UnsecuredValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler and its unsecuredValidator* JAAS options."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    allowable_clock_skew_ms: int = 0

    @classmethod
    def from_jaas(cls, options: Mapping[str, str]) -> UnsecuredValidator:
        skew_text = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip()
        try:
            skew = int(skew_text) if skew_text else 0
        except ValueError:
            raise SaslError(
                f"unsecuredValidatorAllowableClockSkewMs {skew_text!r} is not a number."
            ) from None
        if skew < 0:
            raise SaslError(f"Allowable clock skew millis must not be negative: {skew_text}")
        return cls(
            principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub",
            scope_claim=options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope",
            required_scope=tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
            allowable_clock_skew_ms=skew,
        )

    def validate(self, value: str, now_ms: int | None = None) -> Token:
        """The token's principal, scope and expiry; IllegalToken with Kafka's reason otherwise."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        splits = value.split(".")
        if len(splits) != 3:
            raise IllegalToken(
                f"Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values: {len(splits)}"
            )
        header, claims = _b64url_json(splits[0]), _b64url_json(splits[1])
        if header.get("alg") != "none":
            raise IllegalToken("Unsecured JWS must have 'none' for an algorithm")
        if splits[2]:
            raise IllegalToken("Unsecured JWS must not contain a digital signature")
        principal = claims.get(self.principal_claim)
        if principal is None:
            raise IllegalToken(f"Required claim missing: {self.principal_claim}")
        if not isinstance(principal, str):
            raise IllegalToken(
                f"The {self.principal_claim} claim had the incorrect type: {type(principal).__name__}"
            )
        if not principal.strip():
            raise IllegalToken(f"Required claim missing: {self.principal_claim}")
        issued_at = _number_claim(claims, "iat")
        expiration = _number_claim(claims, "exp")
        skew = self.allowable_clock_skew_ms
        if issued_at is not None and 1000 * issued_at > now + skew:
            raise IllegalToken(
                f"The Issued At value ({issued_at:f} seconds) was after the indicated time ({now} ms) plus "
                f"allowable clock skew ({skew} ms)"
            )
        if expiration is None:
            raise IllegalToken("Required claim missing: exp")
        if now - skew >= 1000 * expiration:
            raise IllegalToken(
                f"The indicated time ({now} ms) minus allowable clock skew ({skew} ms) was on or after the "
                f"Expiration Time value ({expiration:f} seconds)"
            )
        if issued_at is not None and expiration <= issued_at:
            raise IllegalToken(
                f"The Expiration Time time ({expiration:f} seconds) was not after the Issued At time "
                f"({issued_at:f} seconds)"
            )
        raw_scope = claims.get(self.scope_claim)
        scope = (
            tuple(raw_scope)
            if isinstance(raw_scope, list)
            else tuple(str(raw_scope).split())
            if raw_scope
            else ()
        )
        for required in self.required_scope:
            if required not in scope:
                raise IllegalToken(
                    f"The provided scope ({list(scope)}) was missing a required scope ({required}).  "
                    f"All required scope elements: {list(self.required_scope)}",
                    scope=f"[{', '.join(self.required_scope)}]",  # Java's List.toString
                )
        return Token(value, principal, math.floor(expiration * 1000), scope)


def _number_claim(claims: Mapping[str, object], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise IllegalToken(f"The '{name}' claim was not of type Number: {value}")
    return float(value)


class AccessTokenValidator(Protocol):
    """Kafka's AccessTokenValidator: the token's principal, scope and expiry, or IllegalToken."""

    def validate(self, value: str) -> Token: ...


class OAuthBearerServer:
    """Kafka's OAuthBearerSaslServer with the unsecured validator, or the JWKS one (`jwt_validator`)."""

    mechanism = MECHANISM

    def __init__(self, validator: AccessTokenValidator) -> None:
        self._validator = validator
        self._token: Token | None = None
        self._error: str | None = None
        self.failure_reason = ""
        """Why the last token was refused (logged by the broker, not sent)."""

    def evaluate_response(self, response: bytes) -> bytes:
        if response == SEPARATOR.encode() and self._error is not None:
            raise SaslAuthenticationError(self._error)
        self._error = None
        text = response.decode("utf-8", "replace")
        match = _INITIAL_RESPONSE.fullmatch(text)
        if match is None:
            raise SaslCredentialError("Invalid OAUTHBEARER client first message")
        pairs = dict(kv.split("=", 1) for kv in match["kvpairs"].split(SEPARATOR) if kv)
        auth = pairs.pop("auth", None)
        if auth is None:
            raise SaslCredentialError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        bearer = _AUTH.fullmatch(auth)
        if bearer is None:
            raise SaslCredentialError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if bearer["scheme"].lower() != "bearer":
            raise SaslCredentialError(
                f"Invalid scheme in OAUTHBEARER client first message: {bearer['scheme']}"
            )
        try:
            token = self._validator.validate(bearer["token"])
        except IllegalToken as exc:
            status = "insufficient_scope" if exc.scope is not None else "invalid_token"
            scope = f', "scope":"{exc.scope}"' if exc.scope is not None else ""
            self._error = f'{{"status":"{status}"{scope}}}'  # Kafka's jsonErrorResponse
            self.failure_reason = str(exc)
            log.info("OAUTHBEARER token refused: %s", exc)  # Kafka's validator logs the reason alone
            return self._error.encode()
        authzid = match["authzid"]
        if authzid and authzid != token.principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                f"from the token's principal name ({token.principal})"
            )
        self._token = token
        return b""

    @property
    def complete(self) -> bool:
        return self._token is not None

    @property
    def authorization_id(self) -> str:
        assert self._token is not None, "authentication has not completed"
        return self._token.principal

    @property
    def credential_lifetime_ms(self) -> int | None:
        return None if self._token is None else self._token.lifetime_ms
