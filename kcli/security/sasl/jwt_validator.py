"""Signed OAUTHBEARER tokens checked against a JWKS (Kafka's OAuthBearerValidatorCallbackHandler).

The broker side of OAuth with a real identity provider: `sasl.oauthbearer.jwks.endpoint.url` names the
provider's JSON Web Key Set (a file: URL read once at start, as Kafka's JwksFileVerificationKeyResolver
does, or an http(s) one fetched again every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and at once
when a token names a key id not seen yet). A token is a JWS whose header names its key (`kid`) and
algorithm (RS256/384/512 or ES256/384, verified with `cryptography`; `none` is refused), with the
claims Kafka's ValidatorAccessTokenValidator requires: `exp` and `iat`, `nbf` when present, the
expected audience and issuer when configured, all with `sasl.oauthbearer.clock.skew.seconds` of leeway;
the principal is the `sasl.oauthbearer.sub.claim.name` claim. A refused token is an IllegalToken with
the reason Kafka logs; the client is told only `invalid_token`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from kcli.security.sasl import SaslError
from kcli.security.sasl.oauthbearer import IllegalToken, Token

log = logging.getLogger("kcli.broker")

VALIDATOR_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
SERVER_HANDLERS = (
    VALIDATOR_HANDLER,
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
)
"""Kafka's class names of the JWKS validator (the `secured` one is its deprecated alias)."""
UNSECURED_HANDLER = "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"

_HASHES = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
_CURVES = {"P-256": (ec.SECP256R1, 32), "P-384": (ec.SECP384R1, 48)}
_ALG_CURVE = {"ES256": "P-256", "ES384": "P-384"}
_MAX_JWKS = 1 << 20
MIN_REFRESH_S = 1.0
"""The least time between two reads of an http(s) JWKS."""


def _b64url_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64url_int(text: object) -> int:
    if not isinstance(text, str):
        raise ValueError("not a base64url string")
    return int.from_bytes(_b64url_bytes(text), "big")


@dataclass(frozen=True)
class VerificationKey:
    """One key of a JWKS: its id, type and public key."""

    kid: str | None
    kty: str
    key: rsa.RSAPublicKey | ec.EllipticCurvePublicKey
    crv: str | None = None


def parse_jwks(text: bytes | str, source: str) -> list[VerificationKey]:
    """The RSA and EC signing keys of a JWKS document; other keys are skipped, as jose4j skips them."""
    try:
        document = json.loads(text)
        entries = document["keys"]
        if not isinstance(entries, list):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise SaslError(f"the JWKS at {source} is not a JSON object with a list of keys.") from None
    keys = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid") if isinstance(entry.get("kid"), str) else None
        try:
            if entry.get("kty") == "RSA":
                public = rsa.RSAPublicNumbers(_b64url_int(entry["e"]), _b64url_int(entry["n"])).public_key()
                keys.append(VerificationKey(kid, "RSA", public))
            elif entry.get("kty") == "EC" and entry.get("crv") in _CURVES:
                curve = _CURVES[entry["crv"]][0]()
                numbers = ec.EllipticCurvePublicNumbers(
                    _b64url_int(entry["x"]), _b64url_int(entry["y"]), curve
                )
                keys.append(VerificationKey(kid, "EC", numbers.public_key(), entry["crv"]))
        except (KeyError, ValueError, binascii.Error):
            log.warning("the JWKS at %s has a key (kid %s) that cannot be read; it is skipped", source, kid)
    return keys


def read_jwks(url: str, *, timeout: float = 10.0) -> list[VerificationKey]:
    """The keys at `url` (file:, http:, https:); SaslError in one sentence when they cannot be read."""
    parsed = urllib.parse.urlparse(url)
    try:
        if parsed.scheme == "file":
            with open(urllib.request.url2pathname(parsed.path), "rb") as f:
                body = f.read(_MAX_JWKS)
        elif parsed.scheme in ("http", "https"):
            request = urllib.request.Request(url, headers={"Accept": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 (the URL is the operator's)
                body = answer.read(_MAX_JWKS)
        else:
            raise SaslError(f"sasl.oauthbearer.jwks.endpoint.url {url} is not a file:, http: or https: URL.")
    except urllib.error.HTTPError as exc:
        raise SaslError(f"the JWKS endpoint {url} answered HTTP {exc.code} {exc.reason}.") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise SaslError(f"cannot read the JWKS at {url}: {reason}.") from None
    return parse_jwks(body, url)


class VerificationKeyResolver:
    """The JWKS's keys, read at start; an http(s) JWKS is read again every `refresh_ms` in a thread of
    its own (Kafka's RefreshingHttpsJwks), and soon when a token names an unknown key id."""

    def __init__(self, url: str, refresh_ms: int) -> None:
        self.url = url
        self.refresh_s = max(refresh_ms, 1000) / 1000
        self._keys = read_jwks(url)
        self._wake = threading.Event()
        self._stopped = False
        if not url.lower().startswith("file:"):
            threading.Thread(target=self._refresh, name="kcli-jwks-refresh", daemon=True).start()

    @property
    def keys(self) -> Sequence[VerificationKey]:
        return self._keys

    def _refresh(self) -> None:
        last = time.monotonic()
        while not self._stopped:
            self._wake.wait(self.refresh_s)
            self._wake.clear()
            early = MIN_REFRESH_S - (time.monotonic() - last)
            if early > 0:  # tokens naming unknown key ids do not make the provider's JWKS read in a loop
                time.sleep(early)
            last = time.monotonic()
            try:
                self._keys = read_jwks(self.url)
            except SaslError as exc:
                log.warning("%s (the keys read before are kept)", exc)

    def resolve(self, kid: str | None, alg: str) -> VerificationKey:
        kty = "RSA" if alg.startswith("RS") else "EC"
        candidates = [k for k in self._keys if k.kty == kty and (kid is None or k.kid == kid)]
        if kty == "EC":
            candidates = [k for k in candidates if k.crv == _ALG_CURVE[alg]]
        if len(candidates) == 1 or (candidates and kid is not None):
            return candidates[0]
        if kid is not None:
            self._wake.set()  # a key the provider added since the last read: read the JWKS again soon
        raise IllegalToken(
            f"Unable to find a suitable verification key for JWS w/ header {{kid={kid}, alg={alg}}}"
        )

    def close(self) -> None:
        self._stopped = True
        self._wake.set()


@dataclass
class ValidatorAccessTokenValidator:
    """Kafka's ValidatorAccessTokenValidator: signature, then the registered claims, then sub and scope."""

    keys: VerificationKeyResolver
    clock_skew_s: int = 30
    expected_audiences: tuple[str, ...] = ()
    expected_issuer: str | None = None
    scope_claim: str = "scope"
    sub_claim: str = "sub"
    _now: Any = field(default=time.time, repr=False)

    @classmethod
    def from_config(cls, settings: Mapping[str, object]) -> ValidatorAccessTokenValidator:
        """From the broker's `sasl.oauthbearer.*` values (listener-prefixed ones already applied)."""
        url = settings.get("sasl.oauthbearer.jwks.endpoint.url")
        if not url:
            raise SaslError(
                f"{VALIDATOR_HANDLER} needs sasl.oauthbearer.jwks.endpoint.url (the identity provider's JWKS)."
            )
        audience = settings.get("sasl.oauthbearer.expected.audience") or []
        return cls(
            keys=VerificationKeyResolver(
                str(url), int(settings.get("sasl.oauthbearer.jwks.endpoint.refresh.ms") or 3600000)
            ),  # type: ignore[call-overload]
            clock_skew_s=int(settings.get("sasl.oauthbearer.clock.skew.seconds", 30)),  # type: ignore[call-overload]
            expected_audiences=tuple(str(a) for a in audience),  # type: ignore[union-attr]
            expected_issuer=str(settings["sasl.oauthbearer.expected.issuer"])
            if settings.get("sasl.oauthbearer.expected.issuer")
            else None,
            scope_claim=str(settings.get("sasl.oauthbearer.scope.claim.name") or "scope"),
            sub_claim=str(settings.get("sasl.oauthbearer.sub.claim.name") or "sub"),
        )

    def validate(self, value: str) -> Token:
        try:
            claims = self._process(value)
        except IllegalToken as exc:
            raise IllegalToken(f"Could not validate the access token: {exc}") from None
        return self._token(value, claims)

    def _process(self, value: str) -> dict[str, Any]:
        """jose4j's JwtConsumer.process with the constraints Kafka's validator sets."""
        parts = value.split(".")
        if len(parts) != 3:
            raise IllegalToken(f"Invalid JOSE Compact Serialization. Expecting 3 parts but got {len(parts)}")
        try:
            header, claims = json.loads(_b64url_bytes(parts[0])), json.loads(_b64url_bytes(parts[1]))
            signature = _b64url_bytes(parts[2])
        except (ValueError, binascii.Error):
            raise IllegalToken(
                "Unable to parse the JWS: its header, claims or signature is not base64url JSON"
            ) from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise IllegalToken("Unable to parse the JWS: its header and claims must be JSON objects")
        alg = header.get("alg")
        if alg == "none" or not signature:
            raise IllegalToken("'none' is not a permitted algorithm (the JWS must be signed)")
        if alg not in ("RS256", "RS384", "RS512", "ES256", "ES384"):
            raise IllegalToken(f"the JWS algorithm {alg} is not supported (RS256/384/512, ES256/384)")
        kid = header.get("kid") if isinstance(header.get("kid"), str) else None
        key = self.keys.resolve(kid, alg)
        signed = f"{parts[0]}.{parts[1]}".encode()
        digest = _HASHES[alg[2:]]()
        try:
            if isinstance(key.key, rsa.RSAPublicKey):
                key.key.verify(signature, signed, padding.PKCS1v15(), digest)
            else:
                size = _CURVES[key.crv or "P-256"][1]
                if len(signature) != 2 * size:
                    raise InvalidSignature
                r, s = int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
                key.key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(digest))
        except InvalidSignature:
            raise IllegalToken(f"JWS signature is invalid (kid {kid}, alg {alg})") from None
        self._check_claims(claims)
        return claims

    def _check_claims(self, claims: Mapping[str, Any]) -> None:
        now, skew = self._now(), self.clock_skew_s
        exp, iat, nbf = (_numeric(claims, name) for name in ("exp", "iat", "nbf"))
        if exp is None:
            raise IllegalToken("No Expiration Time (exp) claim present.")
        if iat is None:
            raise IllegalToken("No Issued At (iat) claim present.")
        if now - skew >= exp:
            raise IllegalToken(
                f"The JWT is no longer valid - the evaluation time {math.floor(now)} is on or after the Expiration "
                f"Time (exp={exp:g}) claim value (even when providing {skew} seconds of leeway to account for clock skew)."
            )
        if nbf is not None and now + skew < nbf:
            raise IllegalToken(
                f"The JWT is not yet valid as the evaluation time {math.floor(now)} is before the Not Before "
                f"(nbf={nbf:g}) claim time (even when providing {skew} seconds of leeway to account for clock skew)."
            )
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else None
        if self.expected_audiences:
            if audiences is None:
                raise IllegalToken("No Audience (aud) claim present.")
            if not set(map(str, audiences)) & set(self.expected_audiences):
                raise IllegalToken(
                    f"Audience (aud) claim {audiences} doesn't contain an acceptable identifier. Expected one of "
                    f"{list(self.expected_audiences)} as an aud value."
                )
        elif audiences is not None:
            raise IllegalToken(
                f"Audience (aud) claim {audiences} present in the JWT but no expected audience value(s) were "
                f"provided to the JWT Consumer. Expected one of [] as an aud value."
            )
        if self.expected_issuer is not None:
            iss = claims.get("iss")
            if iss is None:
                raise IllegalToken(f"No Issuer (iss) claim present but was expecting {self.expected_issuer}")
            if iss != self.expected_issuer:
                raise IllegalToken(
                    f"Issuer (iss) claim value ({iss}) doesn't match expected value of {self.expected_issuer}"
                )

    def _token(self, value: str, claims: Mapping[str, Any]) -> Token:
        """ClaimValidationUtils: a non-blank subject, non-blank scope entries."""
        sub = claims.get(self.sub_claim)
        if not isinstance(sub, str) or not sub.strip():
            raise IllegalToken(f"{self.sub_claim} value must be non-null and a non-empty string")
        raw = claims.get(self.scope_claim)
        scope = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        for item in scope:
            if not isinstance(item, str) or not item.strip():
                raise IllegalToken(f"{self.scope_claim} value must be non-null and a non-empty string")
        return Token(
            value, sub.strip(), math.floor(float(claims["exp"]) * 1000), tuple(s.strip() for s in scope)
        )


def _numeric(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise IllegalToken(
            f"The value of the '{name}' claim is not the expected type ({value} - not a NumericDate)"
        )
    return float(value)
