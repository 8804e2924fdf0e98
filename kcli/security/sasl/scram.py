"""SASL/SCRAM-SHA-256 and -512 (RFC 5802, RFC 7677) as Kafka's ScramSaslClient and ScramSaslServer run them.

Kafka's details: gs2 header `n,,` only (no channel binding), user names escaped `=2C` / `=3D`, no
SASLprep, the `tokenauth=true` extension for delegation tokens, the server nonce appended to the
client's, and iterations at least 4096. The stored credential (salt, StoredKey, ServerKey, iterations)
and the key derivations come from `kcli.security.scram`.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Callable, Mapping

from kcli.security.sasl import SaslAuthenticationError, SaslCredentialError, SaslError
from kcli.security.scram import (
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    client_key,
    hash_digest,
    hmac_digest,
    random_salt,
    salted_password,
    server_key,
)

CredentialLookup = Callable[[str, str], ScramCredential | None]
"""(mechanism, user name) -> the broker's stored credential, None for an unknown user."""

TOKEN_AUTH = "tokenauth"
"""The extension that marks a delegation-token login (ScramLoginModule.TOKEN_AUTH_CONFIG)."""

# ScramMessages' grammar (Java's [\x01-\x7F&&[^,]] classes spelled out).
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_VALUE_SAFE = r"[\x01-\x2b\x2d-\x3c\x3e-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_RESERVED = rf"(?:m={_VALUE},)?"
_EXTENSIONS = rf"(?P<extensions>(?:,[A-Za-z]+={_VALUE})*)"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{_RESERVED}n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}"
)
_SERVER_FIRST = re.compile(
    rf"{_RESERVED}r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+){_EXTENSIONS}"
)
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_BASE64})"
)
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>{_VALUE_SAFE}))|(?:v=(?P<signature>{_BASE64})){_EXTENSIONS}")
_GS2_HEADER = b"n,,"


def sasl_name(username: str) -> str:
    """ScramFormatter.saslName: `=` -> `=3D`, `,` -> `=2C`."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username(name: str) -> str:
    """ScramFormatter.username: the inverse; a stray `=` is refused."""
    text = name.replace("=2C", ",")
    if "=" in text.replace("=3D", ""):
        raise SaslCredentialError(f"Invalid username: {name}")
    return text.replace("=3D", "=")


def nonce() -> str:
    """ScramFormatter.secureRandomString: a random base-36 string (the same as Kafka's salts)."""
    return random_salt().decode()


def _extensions(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise SaslCredentialError("invalid base64 in a SCRAM message") from None


def _check(mechanism: str) -> None:
    if mechanism not in MECHANISMS:
        raise SaslError(f"{mechanism} is not a SCRAM mechanism ({', '.join(MECHANISMS)}).")


class ScramClient:
    """Kafka's ScramSaslClient: client-first, client-final, then the server signature is checked."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        extensions: Mapping[str, str] | None = None,
        client_nonce: str | None = None,
    ) -> None:
        _check(mechanism)
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._extensions = dict(extensions or {})
        self._nonce = client_nonce or nonce()
        self._client_first_bare = ""
        self._server_signature = b""
        self._state = "send-first"

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism}, username={self._username!r})"

    def initial_response(self) -> bytes:
        extensions = "".join(f",{k}={v}" for k, v in self._extensions.items())
        self._client_first_bare = f"n={sasl_name(self._username)},r={self._nonce}{extensions}"
        self._state = "receive-server-first"
        return _GS2_HEADER + self._client_first_bare.encode()

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._state == "receive-server-first":
            return self._client_final(challenge)
        if self._state == "receive-server-final":
            self._verify_server_final(challenge)
            return None
        raise SaslError(f"unexpected SCRAM challenge in client state {self._state}.")

    def _client_final(self, challenge: bytes) -> bytes:
        text = challenge.decode("utf-8", "replace")
        match = _SERVER_FIRST.fullmatch(text)
        if match is None:
            raise SaslError(f"Invalid SCRAM server first message format: {text}")
        server_nonce, iterations = match["nonce"], int(match["iterations"])
        if not server_nonce.startswith(self._nonce):
            raise SaslError("Invalid server nonce: does not start with client nonce")
        if iterations < MIN_ITERATIONS:
            raise SaslError(
                f"Requested iterations {iterations} is less than the minimum {MIN_ITERATIONS} for {self.mechanism}"
            )
        salted = salted_password(self.mechanism, self._password, _b64decode(match["salt"]), iterations)
        without_proof = f"c={base64.b64encode(_GS2_HEADER).decode()},r={server_nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        key = client_key(self.mechanism, salted)
        signature = hmac_digest(self.mechanism, hash_digest(self.mechanism, key), auth_message)
        proof = bytes(a ^ b for a, b in zip(key, signature, strict=True))
        self._server_signature = hmac_digest(self.mechanism, server_key(self.mechanism, salted), auth_message)
        self._state = "receive-server-final"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, challenge: bytes) -> None:
        text = challenge.decode("utf-8", "replace")
        match = _SERVER_FINAL.fullmatch(text)
        if match is None:
            raise SaslError(f"Invalid SCRAM server final message format: {text}")
        if match["error"] is not None:
            raise SaslAuthenticationError(
                f"Sasl authentication using {self.mechanism} failed with error: {match['error']}"
            )
        if not hmac.compare_digest(_b64decode(match["signature"]), self._server_signature):
            raise SaslError("Invalid server signature in server final message")
        self._state = "complete"

    @property
    def complete(self) -> bool:
        return self._state == "complete"


class ScramServer:
    """Kafka's ScramSaslServer: looks the user's credential up, checks the client's proof."""

    def __init__(
        self, mechanism: str, credentials: CredentialLookup, *, server_nonce: str | None = None
    ) -> None:
        _check(mechanism)
        self.mechanism = mechanism
        self._credentials = credentials
        self._server_nonce = server_nonce
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._authorization_id: str | None = None
        self._complete = False
        self.extensions: dict[str, str] = {}

    def evaluate_response(self, response: bytes) -> bytes:
        try:
            if self._credential is None:
                return self._server_first_message(response)
            return self._server_final_message(response)
        except SaslError:
            self._credential = None
            raise

    def _server_first_message(self, response: bytes) -> bytes:
        text = response.decode("utf-8", "replace")
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise SaslCredentialError(f"Invalid SCRAM client first message format: {text}")
        self.extensions = _extensions(match["extensions"])
        if self.extensions.get(TOKEN_AUTH, "").lower() == "true":
            # delegation tokens are not kept by kcli: no token id is ever valid
            raise SaslCredentialError(f"Token Authentication failed: Invalid tokenId : {match['saslname']}")
        user = username(match["saslname"])
        credential = self._credentials(self.mechanism, user)
        if credential is None:
            raise SaslCredentialError("Authentication failed: Invalid user credentials")
        authzid = match["authzid"]
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if credential.iterations < MIN_ITERATIONS:
            raise SaslCredentialError(
                f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} for {self.mechanism}"
            )
        self._nonce = match["nonce"] + (self._server_nonce or nonce())
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._client_first_bare = _bare(text)
        self._credential = credential
        self._authorization_id = user
        return self._server_first.encode()

    def _server_final_message(self, response: bytes) -> bytes:
        credential = self._credential
        assert credential is not None
        text = response.decode("utf-8", "replace")
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise SaslCredentialError(f"Invalid SCRAM client final message format: {text}")
        if not match["nonce"].endswith(self._nonce):
            raise SaslCredentialError("Invalid client nonce in the final client message.")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac_digest(self.mechanism, credential.stored_key, auth_message)
        proof = _b64decode(match["proof"])
        if len(proof) != len(signature):
            raise SaslCredentialError("Invalid client credentials")
        key = bytes(a ^ b for a, b in zip(signature, proof, strict=True))
        if not hmac.compare_digest(hash_digest(self.mechanism, key), credential.stored_key):
            raise SaslCredentialError("Invalid client credentials")
        server_signature = hmac_digest(self.mechanism, credential.server_key, auth_message)
        self._complete = True
        self._credential = None
        return f"v={base64.b64encode(server_signature).decode()}".encode()

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def authorization_id(self) -> str:
        assert self._complete and self._authorization_id is not None, "authentication has not completed"
        return self._authorization_id

    @property
    def credential_lifetime_ms(self) -> int | None:
        return None


def _bare(client_first: str) -> str:
    """client-first-message-bare: what follows the gs2 header (`n,[a=...],`)."""
    return client_first.split(",", 2)[2]
