"""The SASL mechanisms without a network: RFC 7677's SCRAM-SHA-256 example, Kafka's SCRAM details
(escaped names, nonce checks, tokenauth, `e=`), PLAIN's messages, OAUTHBEARER's client response and
Kafka's unsecured-token rules, and the JAAS line parser."""

from __future__ import annotations

import base64
import json
import random
import re

import pytest

from kcli.security import ClientSecurity
from kcli.security.jaas import JaasError, parse_jaas_config
from kcli.security.sasl import SaslAuthenticationError, SaslCredentialError, SaslError
from kcli.security.sasl.client import client_mechanism
from kcli.security.sasl.oauthbearer import (
    OAuthBearerClient,
    OAuthBearerServer,
    UnsecuredValidator,
    client_initial_response,
    unsecured_token,
)
from kcli.security.sasl.plain import PlainClient, PlainServer, users_from_jaas
from kcli.security.sasl.scram import ScramClient, ScramServer, sasl_name, username
from kcli.security.scram import credential_from_password

# RFC 7677 section 3
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credentials(mechanism: str, user: str):
    if user != "user":
        return None
    return credential_from_password(mechanism, "pencil", 4096, salt=RFC_SALT)


def test_rfc7677_client() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    assert client.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.evaluate_challenge(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not client.complete
    assert client.evaluate_challenge(RFC_SERVER_FINAL) is None
    assert client.complete


def test_rfc7677_server() -> None:
    server = ScramServer("SCRAM-SHA-256", rfc_credentials, server_nonce=RFC_SERVER_NONCE)
    assert server.evaluate_response(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == RFC_SERVER_FIRST
    assert server.evaluate_response(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.authorization_id == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_with_an_escaped_name(mechanism: str) -> None:
    name = "a=b,c"
    stored = credential_from_password(mechanism, "secret", 4096)
    server = ScramServer(mechanism, lambda m, u: stored if (m, u) == (mechanism, name) else None)
    client = ScramClient(mechanism, name, "secret")
    first = client.initial_response()
    assert b"n=a=3Db=2Cc," in first
    final = client.evaluate_challenge(server.evaluate_response(first))
    assert client.evaluate_challenge(server.evaluate_response(final)) is None
    assert client.complete and server.authorization_id == name
    assert username(sasl_name(name)) == name


def test_scram_wrong_password_and_unknown_user_are_not_told_apart() -> None:
    stored = credential_from_password("SCRAM-SHA-256", "secret", 4096)
    server = ScramServer("SCRAM-SHA-256", lambda m, u: stored if u == "alice" else None)
    client = ScramClient("SCRAM-SHA-256", "alice", "wrong")
    final = client.evaluate_challenge(server.evaluate_response(client.initial_response()))
    with pytest.raises(SaslCredentialError, match="Invalid client credentials"):
        server.evaluate_response(final)
    with pytest.raises(SaslCredentialError, match="Invalid user credentials"):
        ScramServer("SCRAM-SHA-256", lambda m, u: None).evaluate_response(b"n,,n=bob,r=abc")


def test_scram_nonce_checks_both_ways() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", client_nonce="mine")
    client.initial_response()
    with pytest.raises(SaslError, match="does not start with client nonce"):
        client.evaluate_challenge(b"r=other123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    server = ScramServer("SCRAM-SHA-256", rfc_credentials, server_nonce=RFC_SERVER_NONCE)
    server.evaluate_response(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(SaslCredentialError, match="Invalid client nonce"):
        server.evaluate_response(RFC_CLIENT_FINAL.replace(b"hNlF$k0", b"hNlF$k1"))


def test_scram_client_checks_iterations_server_error_and_signature() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    client.initial_response()
    with pytest.raises(SaslError, match="Requested iterations 1000 is less than the minimum 4096"):
        client.evaluate_challenge(RFC_SERVER_FIRST.replace(b"i=4096", b"i=1000"))
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    client.initial_response()
    client.evaluate_challenge(RFC_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match="failed with error: invalid-proof"):
        client.evaluate_challenge(b"e=invalid-proof")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    client.initial_response()
    client.evaluate_challenge(RFC_SERVER_FIRST)
    with pytest.raises(SaslError, match="Invalid server signature"):
        client.evaluate_challenge(b"v=" + base64.b64encode(b"x" * 32))


def test_scram_tokenauth_is_refused_and_bad_messages_are_one_sentence() -> None:
    server = ScramServer("SCRAM-SHA-256", rfc_credentials)
    with pytest.raises(SaslCredentialError, match="Token Authentication failed: Invalid tokenId : user"):
        server.evaluate_response(b"n,,n=user,r=abc,tokenauth=true")
    with pytest.raises(SaslCredentialError, match="Invalid SCRAM client first message format"):
        ScramServer("SCRAM-SHA-256", rfc_credentials).evaluate_response(b"p=tls-unique,,n=user,r=abc")
    with pytest.raises(SaslCredentialError, match="Invalid SCRAM client first message format: n,,n=a=b"):
        ScramServer("SCRAM-SHA-256", rfc_credentials).evaluate_response(b"n,,n=a=b,r=abc")  # a bare "="


def test_plain_messages_are_kafkas() -> None:
    server = PlainServer(users_from_jaas({"user_alice": "alice-secret", "username": "admin"}))
    with pytest.raises(
        SaslAuthenticationError, match="^Authentication failed: Invalid username or password$"
    ):
        server.evaluate_response(b"\0alice\0wrong")
    with pytest.raises(SaslAuthenticationError, match="expected 3 tokens, got 2"):
        server.evaluate_response(b"alice\0x")
    with pytest.raises(SaslAuthenticationError, match="username not specified"):
        server.evaluate_response(b"\0\0x")
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        server.evaluate_response(b"bob\0alice\0alice-secret")
    client = PlainClient("alice", "alice-secret")
    assert server.evaluate_response(client.initial_response()) == b""
    assert server.authorization_id == "alice" and "alice-secret" not in repr(client)


def test_oauthbearer_client_response_and_unsecured_token() -> None:
    token = unsecured_token(
        {"unsecuredLoginStringClaim_sub": "carol", "unsecuredLoginListClaim_scope": " read write"},
        now_ms=1_000_000,
    )
    header, claims, signature = token.value.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"} and signature == ""
    body = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    assert body == {"exp": 4600.0, "iat": 1000.0, "sub": "carol", "scope": ["read", "write"]}
    assert client_initial_response("abc", {"traceId": "1"}) == b"n,,\x01auth=Bearer abc\x01traceId=1\x01\x01"
    assert client_initial_response("abc") == b"n,,\x01auth=Bearer abc\x01\x01"
    with pytest.raises(SaslError, match="Cannot explicitly set the 'exp' claim"):
        unsecured_token({"unsecuredLoginStringClaim_sub": "c", "unsecuredLoginNumberClaim_exp": "1"})


def test_oauthbearer_server_follows_the_unsecured_validator() -> None:
    good = unsecured_token(
        {"unsecuredLoginStringClaim_sub": "carol", "unsecuredLoginListClaim_scope": ",read"}
    )
    server = OAuthBearerServer(UnsecuredValidator.from_jaas({"unsecuredValidatorRequiredScope": "read"}))
    assert server.evaluate_response(OAuthBearerClient(good).initial_response()) == b""
    assert server.authorization_id == "carol" and server.credential_lifetime_ms == good.lifetime_ms

    expired = unsecured_token(
        {"unsecuredLoginStringClaim_sub": "carol", "unsecuredLoginLifetimeSeconds": "1"}, now_ms=0
    )
    server = OAuthBearerServer(UnsecuredValidator())
    client = OAuthBearerClient(expired)
    challenge = server.evaluate_response(client.initial_response())
    assert challenge == b'{"status":"invalid_token"}'
    assert "was on or after the Expiration Time value" in server.failure_reason
    with pytest.raises(SaslAuthenticationError, match='^{"status":"invalid_token"}$'):
        server.evaluate_response(client.evaluate_challenge(challenge))

    server = OAuthBearerServer(UnsecuredValidator.from_jaas({"unsecuredValidatorRequiredScope": "admin"}))
    assert server.evaluate_response(client_initial_response(good.value)) == (
        b'{"status":"insufficient_scope", "scope":"[admin]"}'
    )
    signed = good.value + "c2ln"
    assert (
        OAuthBearerServer(UnsecuredValidator())
        .evaluate_response(client_initial_response(signed))
        .startswith(b'{"status":"invalid_token"')
    )
    with pytest.raises(
        SaslCredentialError, match="Invalid scheme in OAUTHBEARER client first message: Basic"
    ):
        OAuthBearerServer(UnsecuredValidator()).evaluate_response(b"n,,\x01auth=Basic abc\x01\x01")


def test_client_mechanism_from_client_security() -> None:
    def security(mechanism: str, **jaas: str) -> ClientSecurity:
        return ClientSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, jaas=jaas)

    assert (
        client_mechanism(security("SCRAM-SHA-512", username="a", password="b")).mechanism == "SCRAM-SHA-512"
    )
    with pytest.raises(SaslError, match=r"^SASL mechanism GSSAPI \(Kerberos\) is not supported by kcli"):
        client_mechanism(security("GSSAPI"))
    with pytest.raises(SaslError, match="SASL/PLAIN needs username and password in sasl.jaas.config."):
        client_mechanism(security("PLAIN", username="a"))
    with pytest.raises(SaslError, match="needs the JAAS option unsecuredLoginStringClaim_sub"):
        client_mechanism(security("OAUTHBEARER"))


def test_jaas_lines() -> None:
    config = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="a \\"b\\" c" user_admin=admin-secret;'
    )
    assert config.login_module.endswith("PlainLoginModule") and config.flag == "required"
    assert config.options == {"username": "admin", "password": 'a "b" c', "user_admin": "admin-secret"}
    assert "admin-secret" not in repr(config)
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    for bad, message in [
        ("x", "sasl.jaas.config: the login module control flag (required) is not given."),
        (f"{plain} maybe a=b;", "control flag must be required, requisite, sufficient or optional."),
        (f"{plain} required a;", "sasl.jaas.config: option 1 is not name=value"),
        (f"{plain} required a=b; {plain} required c=d;", "2 login modules are given; it takes exactly one."),
        ("PlainLoginModule required user_a=b;", "the login module PlainLoginModule is not supported by kcli"),
    ]:
        with pytest.raises(JaasError, match=re.escape(message)):
            parse_jaas_config(bad)


def test_random_tokens_only_ever_fail_authentication() -> None:
    """Whatever a client sends, a server mechanism answers or raises SaslError (the broker's rule)."""
    rng = random.Random(7)
    stored = credential_from_password("SCRAM-SHA-256", "pencil", 4096)
    seeds = [
        b"n,,n=user,r=abc",
        b"\0alice\0secret",
        client_initial_response(unsecured_token({"unsecuredLoginStringClaim_sub": "c"}).value),
        b"c=biws,r=abc,p=AAAA",
    ]
    for _ in range(3000):
        seed = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):
            seed[rng.randrange(len(seed))] = rng.randrange(256)
        servers = [
            ScramServer("SCRAM-SHA-256", lambda m, u: stored),
            PlainServer(users_from_jaas({"user_alice": "secret"})),
            OAuthBearerServer(UnsecuredValidator()),
        ]
        for server in servers:
            try:
                server.evaluate_response(bytes(seed))
                if isinstance(server, ScramServer) and not server.complete:
                    server.evaluate_response(bytes(seed))
            except SaslError:
                pass
