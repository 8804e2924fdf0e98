"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka derives and stores them.

A broker never keeps a password: it keeps salt, StoredKey, ServerKey and the iteration count per user and
mechanism (UserScramCredentialRecord). A client that alters a credential sends the salt and the salted
password (AlterUserScramCredentials), and `kcli storage format --add-scram` derives the same values.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

MECHANISMS: dict[str, tuple[int, str]] = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
"""Mechanism name -> (Kafka's ScramMechanism type byte, hashlib name)."""

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
"""Kafka's bounds for both mechanisms (ScramMechanism)."""


@dataclass(frozen=True)
class ScramCredential:
    """What a broker stores for one user and mechanism."""

    mechanism: str
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def _digest(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism][1]
    except KeyError:
        raise ValueError(f"{mechanism} is not a SCRAM mechanism ({', '.join(MECHANISMS)}).") from None


def hmac_digest(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, _digest(mechanism)).digest()


def hash_digest(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(_digest(mechanism), data).digest()


@functools.lru_cache(maxsize=32)
def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC (Kafka does not SASLprep the password).
    Kept for the next login with the same salt: a client opening a connection per broker (or many at
    once) would otherwise spend thousands of HMACs on each, and the password is in its memory anyway."""
    return hashlib.pbkdf2_hmac(_digest(mechanism), password.encode(), salt, iterations)


def client_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Client Key")


def server_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Server Key")


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored form of a credential an AlterUserScramCredentials upsertion carries."""
    return ScramCredential(
        mechanism=mechanism,
        salt=salt,
        stored_key=hash_digest(mechanism, client_key(mechanism, salted)),
        server_key=server_key(mechanism, salted),
        iterations=iterations,
    )


def random_salt() -> bytes:
    """A fresh salt like Kafka's ScramFormatter.secureRandomBytes (a random base-36 string's bytes)."""
    value = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while value:
        value, digit = divmod(value, 36)
        text = digits[digit] + text
    return (text or "0").encode()


def credential_from_password(
    mechanism: str, password: str, iterations: int, salt: bytes | None = None
) -> ScramCredential:
    salt = salt if salt is not None else random_salt()
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )
