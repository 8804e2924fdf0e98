"""SASL mechanisms as Kafka speaks them, without I/O: each side turns the peer's token into its own.

A client mechanism gives its first token (`initial_response`), then answers each server token with
`evaluate_challenge` until `complete`; a server mechanism answers each client token with
`evaluate_response`. Who carries the tokens (SaslAuthenticate, or raw frames after a SaslHandshake v0)
is the authenticator's business (`kcli.broker.authenticator`, `kcli.client`).

Failures follow Kafka's split: `SaslAuthenticationError` carries a message meant for the client
(Kafka's SaslAuthenticationException), `SaslCredentialError` one that is not, since it may tell whether
a user exists (Kafka's SaslException: the client only hears "invalid credentials").
"""

from __future__ import annotations

from typing import Protocol

ENABLED_DEFAULT = "GSSAPI"
"""Kafka's default `sasl.enabled.mechanisms` and `sasl.mechanism`."""

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
"""What kcli speaks, client and broker side."""

GSSAPI_REFUSAL = (
    "SASL mechanism GSSAPI (Kerberos) is not supported by kcli; use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
    "or OAUTHBEARER."
)


class SaslError(Exception):
    """A SASL exchange that cannot go on."""


class SaslAuthenticationError(SaslError):
    """Authentication failed, with a message the client may see (Kafka's SaslAuthenticationException)."""


class SaslCredentialError(SaslError):
    """Authentication failed for a reason kept from the client (Kafka's SaslException)."""


class SaslClientMechanism(Protocol):
    mechanism: str

    def initial_response(self) -> bytes: ...

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The next token for the server; None when there is nothing more to send."""
        ...

    @property
    def complete(self) -> bool: ...


class SaslServerMechanism(Protocol):
    mechanism: str

    def evaluate_response(self, response: bytes) -> bytes:
        """The next token for the client; raises SaslAuthenticationError / SaslCredentialError."""
        ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user name (the principal is `User:<name>`)."""
        ...

    @property
    def credential_lifetime_ms(self) -> int | None:
        """When the credential expires (epoch ms; an OAUTHBEARER token's exp), None if it does not."""
        ...


def check_mechanism(mechanism: str) -> None:
    """Refuse what kcli does not speak, in one sentence."""
    if mechanism == "GSSAPI":
        raise SaslError(GSSAPI_REFUSAL)
    if mechanism not in MECHANISMS:
        raise SaslError(
            f"SASL mechanism {mechanism!r} is not supported; kcli speaks {', '.join(MECHANISMS)}."
        )
