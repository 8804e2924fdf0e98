"""SASL/PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`, checked against the broker's JAAS users.

Kafka's PlainServerCallbackHandler takes the users from the broker's JAAS options `user_<name>="<password>"`.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping

from kcli.security.sasl import SaslAuthenticationError, SaslError

MECHANISM = "PLAIN"

PlainAuthenticator = Callable[[str, str], bool]
"""(username, password) -> whether they match."""


class PlainClient:
    mechanism = MECHANISM

    def __init__(self, username: str, password: str, authorization_id: str = "") -> None:
        self._username = username
        self._password = password
        self._authorization_id = authorization_id
        self._complete = False

    def __repr__(self) -> str:
        return f"PlainClient(username={self._username!r})"

    def initial_response(self) -> bytes:
        self._complete = True
        return f"{self._authorization_id}\0{self._username}\0{self._password}".encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if challenge:
            raise SaslError("the broker answered SASL/PLAIN with an unexpected challenge.")
        return None

    @property
    def complete(self) -> bool:
        return self._complete


def users_from_jaas(options: Mapping[str, str]) -> PlainAuthenticator:
    """Kafka's PlainServerCallbackHandler: `user_<name>` options hold each user's password."""
    users = {k[len("user_") :]: v for k, v in options.items() if k.startswith("user_")}

    def authenticate(username: str, password: str) -> bool:
        expected = users.get(username)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    return authenticate


class PlainServer:
    mechanism = MECHANISM

    def __init__(self, authenticate: PlainAuthenticator) -> None:
        self._authenticate = authenticate
        self._authorization_id: str | None = None

    def evaluate_response(self, response: bytes) -> bytes:
        """Kafka's PlainSaslServer.evaluateResponse, with its messages."""
        tokens = response.decode("utf-8", "replace").split("\0", 3)
        if len(tokens) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
            )
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if not self._authenticate(username, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._authorization_id = username
        return b""

    @property
    def complete(self) -> bool:
        return self._authorization_id is not None

    @property
    def authorization_id(self) -> str:
        assert self._authorization_id is not None, "authentication has not completed"
        return self._authorization_id

    @property
    def credential_lifetime_ms(self) -> int | None:
        return None
