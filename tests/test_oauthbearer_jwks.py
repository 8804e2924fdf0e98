"""OAUTHBEARER with signed tokens checked against a JWKS (Kafka's OAuthBearerValidatorCallbackHandler).

The keys and tokens are made here with `cryptography`; the broker reads the JWKS from a file: URL. A
client gets its token from a small local token endpoint (kcli's client-credentials login); the scope it
asks for picks which token the endpoint hands out. A valid RS256 or ES256 token authenticates; an
expired one, one for another audience or issuer, and one signed by a key not in the JWKS are refused
with Kafka's `invalid_token` status, and the broker goes on serving.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import BrokerProcess, stop_cleanly
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from local_http import json_endpoint
from test_sasl_broker import metadata, oauth, properties, start_formatted

from kcli.client import ClientError, KafkaClient

pytestmark = pytest.mark.timeout(120)

ISSUER = "https://issuer.example"
AUDIENCE = "kafka-brokers"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def number(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
STRANGER = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks() -> dict:
    r, e = RSA_KEY.public_key().public_numbers(), EC_KEY.public_key().public_numbers()
    return {
        "keys": [
            {"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": number(r.n), "e": number(r.e)},
            {"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": number(e.x), "y": number(e.y)},
        ]
    }


def sign(claims: dict, alg: str = "RS256", kid: str = "rsa-1", key: object = RSA_KEY) -> str:
    header = b64url(json.dumps({"alg": alg, "kid": kid, "typ": "JWT"}).encode())
    body = b64url(json.dumps(claims).encode())
    signed = f"{header}.{body}".encode()
    if alg == "RS256":
        signature = key.sign(signed, padding.PKCS1v15(), hashes.SHA256())  # type: ignore[attr-defined]
    else:
        r, s = decode_dss_signature(key.sign(signed, ec.ECDSA(hashes.SHA256())))  # type: ignore[attr-defined]
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return f"{header}.{body}.{b64url(signature)}"


def claims(**changes: object) -> dict:
    now = int(time.time())
    base = {"sub": "svc", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600, "scope": "kafka"}
    base.update(changes)
    return base


TOKENS = {
    "rs256": lambda: sign(claims()),
    "es256": lambda: sign(claims(sub="svc-ec"), alg="ES256", kid="ec-1", key=EC_KEY),
    "expired": lambda: sign(claims(iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)),
    "audience": lambda: sign(claims(aud="someone-else")),
    "issuer": lambda: sign(claims(iss="https://elsewhere.example")),
    "badsig": lambda: sign(claims(), key=STRANGER),
    "unknownkid": lambda: sign(claims(), kid="rsa-2"),
}


@pytest.fixture(scope="module")
def token_url() -> Iterator[str]:
    """A client-credentials token endpoint: the requested scope names the token it answers."""

    def answer(method: str, form: str, headers: dict[str, str]) -> object:
        scope = dict(pair.split("=", 1) for pair in form.split("&")).get("scope", "rs256")
        return {"access_token": TOKENS[scope](), "token_type": "bearer", "expires_in": 600}

    with json_endpoint(answer, "/token") as url:
        yield url


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("oauth-jwks")
    keys = workdir / "jwks.json"
    keys.write_text(json.dumps(jwks()))
    extra = f"""listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class={VALIDATOR}
sasl.oauthbearer.jwks.endpoint.url={keys.as_uri()}
sasl.oauthbearer.expected.audience={AUDIENCE}
sasl.oauthbearer.expected.issuer={ISSUER}
"""
    process = start_formatted(workdir, properties(workdir, "OAUTHBEARER,PLAIN", extra))
    try:
        yield process
    finally:
        stop_cleanly(process)


@pytest.mark.parametrize("token", ["rs256", "es256"])
def test_a_signed_token_authenticates(broker: BrokerProcess, token_url: str, token: str) -> None:
    async def run() -> object:
        async with await KafkaClient.connect(broker.bootstrap, security=oauth(token_url, token)) as client:
            return await metadata(client)

    assert len(asyncio.run(run()).brokers) == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("expired", "The JWT is no longer valid"),
        ("audience", "Audience (aud) claim ['someone-else'] doesn't contain an acceptable identifier"),
        ("issuer", "Issuer (iss) claim value (https://elsewhere.example) doesn't match"),
        ("badsig", "JWS signature is invalid"),
        ("unknownkid", "Unable to find a suitable verification key"),
    ],
)
def test_a_bad_token_is_refused_with_invalid_token(
    broker: BrokerProcess, token_url: str, token: str, reason: str
) -> None:
    async def run() -> None:
        with pytest.raises(ClientError) as refused:
            await KafkaClient.connect(broker.bootstrap, security=oauth(token_url, token))
        assert str(refused.value) == (
            f'SASL/OAUTHBEARER authentication with {broker.bootstrap} failed: {{"status":"invalid_token"}}.'
        )
        async with await KafkaClient.connect(broker.bootstrap, security=oauth(token_url, "rs256")) as client:
            await metadata(client)  # the broker goes on serving

    asyncio.run(run())
    assert f"Could not validate the access token: {reason}" in broker.log()
    assert TOKENS["rs256"]().split(".")[2] not in broker.log()


def test_the_validator_needs_a_jwks_url(tmp_path: Path) -> None:
    from kcli.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="needs sasl.oauthbearer.jwks.endpoint.url"):
        BrokerConfig.load(
            settings={
                "process.roles": "broker,controller",
                "node.id": "1",
                "controller.quorum.voters": "1@127.0.0.1:9093",
                "controller.listener.names": "CONTROLLER",
                "listeners": "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
                "log.dirs": str(tmp_path),
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            }
        )


def test_an_http_jwks_is_read_again_for_a_new_key_id() -> None:
    """An http(s) JWKS is fetched at start, and again when a token names a key id not seen yet."""
    from kcli.security.sasl.jwt_validator import ValidatorAccessTokenValidator
    from kcli.security.sasl.oauthbearer import IllegalToken

    served = {"keys": [jwks()["keys"][1]]}  # the EC key only, at first

    with json_endpoint(lambda method, body, headers: served, "/jwks") as url:
        validator = ValidatorAccessTokenValidator.from_config(
            {
                "sasl.oauthbearer.jwks.endpoint.url": url,
                "sasl.oauthbearer.jwks.endpoint.refresh.ms": 3600000,
                "sasl.oauthbearer.expected.audience": [AUDIENCE],
                "sasl.oauthbearer.clock.skew.seconds": 30,
            }
        )
        try:
            assert validator.validate(TOKENS["es256"]()).principal == "svc-ec"
            with pytest.raises(IllegalToken, match="Unable to find a suitable verification key"):
                validator.validate(TOKENS["rs256"]())
            served["keys"] = jwks()["keys"]  # the provider adds its RSA key

            def accepted() -> bool:
                try:
                    return validator.validate(TOKENS["rs256"]()).principal == "svc"
                except IllegalToken:
                    time.sleep(0.1)
                    return False

            assert any(accepted() for _ in range(50))
        finally:
            validator.keys.close()
