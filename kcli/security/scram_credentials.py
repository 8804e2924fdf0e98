"""SCRAM credentials as metadata records, and the operator's ways of writing them down.

`credential_record` is the UserScramCredentialRecord of a stored credential, shared by the controller
(AlterUserScramCredentials) and `kcli storage format --add-scram`, which parses its arguments here as
Kafka's ScramParser does ('SCRAM-SHA-512=[name=alice,password=alice-secret]', also iterations=, salt=
and saltedpassword=, salt and salted password in base64). `parse_user_credential` reads kafka-configs.sh's
'iterations=8192,password=...' value of a mechanism.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from kcli.errors import KcliError
from kcli.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_password,
    credential_from_salted_password,
)

MECHANISM_NAMES: dict[int, str] = {type_: name for name, (type_, _) in MECHANISMS.items()}
"""Kafka's ScramMechanism type byte (UserScramCredentialRecord.Mechanism, the admin APIs') -> its name."""

MAX_NAME_BYTES = 0x7FFF
"""The longest user name a UserScramCredentialRecord holds (any string field of a Kafka message)."""

DEFAULT_ITERATIONS = 4096
"""What --add-scram (ScramParser) and kafka-configs.sh (ConfigCommand) use without iterations=."""


class ScramArgumentError(KcliError):
    """A credential argument that cannot be used; one sentence, exit code 2."""


def credential_record(user: str, credential: ScramCredential) -> tuple[str, int, dict[str, Any]]:
    """(record name, version, fields) of the UserScramCredentialRecord storing `credential` for `user`."""
    return (
        "UserScramCredentialRecord",
        0,
        {
            "name": user,
            "mechanism": MECHANISMS[credential.mechanism][0],
            "salt": credential.salt,
            "storedKey": credential.stored_key,
            "serverKey": credential.server_key,
            "iterations": credential.iterations,
        },
    )


# --- kafka-storage.sh format --add-scram (ScramParser) -----------------------------------------------


def parse_add_scram(argument: str) -> tuple[str, ScramCredential]:
    """(user, credential) of one --add-scram argument, with ScramParser's sentences for bad ones."""
    _require_text(argument, "An --add-scram argument")
    text = argument.strip()
    mechanism, sep, config = text.partition("=")
    if not sep:
        raise ScramArgumentError(f"Failed to find equals sign in SCRAM argument '{text}'")
    if mechanism not in MECHANISMS:
        raise ScramArgumentError(f"The add-scram mechanism {mechanism} is not supported.")
    if not config.startswith("["):
        raise ScramArgumentError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise ScramArgumentError("Expected configuration string to end with ]")
    components: dict[str, str] = {}
    for component in config[1:-1].split(","):
        key, sep, value = component.partition("=")
        if not sep:
            raise ScramArgumentError(f"No equals sign found in SCRAM component: {component}")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        components[key] = value
    name = components.pop("name", None)
    if name is None:
        raise ScramArgumentError("You must supply 'name' to add-scram")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise ScramArgumentError(f"The 'name' given to add-scram is longer than {MAX_NAME_BYTES} bytes.")
    salt_text = components.pop("salt", None)
    salt = None if salt_text is None else _base64(salt_text, f"Failed to decode given salt: {salt_text}")
    iterations_text = components.pop("iterations", None)
    iterations = DEFAULT_ITERATIONS
    if iterations_text is not None:
        try:
            iterations = int(iterations_text)
        except ValueError:
            raise ScramArgumentError(f"Failed to parse iterations count: {iterations_text}") from None
    password = components.pop("password", None)
    salted_text = components.pop("saltedpassword", None)
    salted = None
    if password is None:
        if salted_text is None:
            raise ScramArgumentError("You must supply one of 'password' or 'saltedpassword' to add-scram")
        if salt is None:
            raise ScramArgumentError("You must supply 'salt' with 'saltedpassword' to add-scram")
        salted = _base64(salted_text, f"Failed to decode given saltedPassword: {salted_text}")
    if components:
        raise ScramArgumentError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}")
    if iterations < MIN_ITERATIONS:
        raise ScramArgumentError(
            f"The 'iterations' value must be >= {MIN_ITERATIONS} for add-scram using {mechanism}"
        )
    if iterations > MAX_ITERATIONS:
        raise ScramArgumentError(
            f"The 'iterations' value must be <= {MAX_ITERATIONS} for add-scram using {mechanism}"
        )
    if salted is not None:
        assert salt is not None
        return name, credential_from_salted_password(mechanism, salt, salted, iterations)
    assert password is not None
    return name, credential_from_password(mechanism, password, iterations, salt)


def _require_text(value: str, what: str) -> None:
    """Refuse what is not UTF-8 text (bytes the shell passed that no encoding makes a string of),
    without quoting it: it may hold a password."""
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ScramArgumentError(f"{what} is not valid UTF-8 text.") from None


def _base64(text: str, error: str) -> bytes:
    """Java's Base64.getDecoder: the standard alphabet, padding optional but never wrong."""
    if not re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", text) or len(text.rstrip("=")) % 4 == 1:
        raise ScramArgumentError(error)
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ScramArgumentError(error) from None


# --- kafka-configs.sh --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]' -------------------

_USER_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def parse_user_credential(mechanism: str, value: str) -> tuple[int, str]:
    """(iterations, password) of a mechanism's --add-config value, as ConfigCommand reads it:
    iterations default to 4096 (also for -1) and may not be below the mechanism's minimum."""
    _require_text(value, f"The {mechanism} credential")
    match = _USER_CREDENTIAL.fullmatch(value)
    if match is None:
        raise ScramArgumentError(
            f"Invalid credential property {mechanism}=[hidden]: expected [iterations=N,]password=PASSWORD."
        )
    iterations_text, password = match.groups()
    try:
        iterations = (
            DEFAULT_ITERATIONS if iterations_text in (None, "-1") else int(iterations_text)  # type: ignore[arg-type]
        )
    except ValueError:
        raise ScramArgumentError(f"Invalid iterations count {iterations_text!r} for {mechanism}.") from None
    if iterations < MIN_ITERATIONS:
        raise ScramArgumentError(
            f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for {mechanism}"
        )
    return iterations, password
