"""Users' SCRAM credentials as kafka-configs.sh handles them (--entity-type users, KIP-554).

The password never leaves this process: as Kafka's admin client, the tool picks a random salt, computes
the salted password and sends those (AlterUserScramCredentials); the controller derives the stored
keys. DescribeUserScramCredentials gives back each user's mechanisms and iteration counts only.
Both work against Apache Kafka as well as kcli's broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.cluster import Cluster
from kcli.errors import KcliError
from kcli.protocol.messages import build, nested_type
from kcli.security.scram import MECHANISMS, random_salt, salted_password
from kcli.security.scram_credentials import MECHANISM_NAMES, parse_user_credential

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51


class ScramError(KcliError):
    """A credential the cluster refused to describe or change; the sentence carries its reason."""


@dataclass(frozen=True, slots=True)
class UserScramCredentials:
    """One user's credentials as DescribeUserScramCredentials tells them: (mechanism, iterations)."""

    user: str
    credentials: tuple[tuple[str, int], ...]

    def describe_line(self) -> str:
        """kafka-configs.sh --describe's line for the user."""
        infos = ", ".join(
            f"{mechanism}=iterations={iterations}" for mechanism, iterations in self.credentials
        )
        return f"SCRAM credential configs for user-principal '{self.user}' are {infos}"

    def to_json(self) -> dict[str, object]:
        return {
            "entity_type": "users",
            "entity_name": self.user,
            "credentials": [{"mechanism": m, "iterations": i} for m, i in self.credentials],
        }


async def describe_user_scram_credentials(
    cluster: Cluster, users: Iterable[str] | None = None
) -> list[UserScramCredentials]:
    """The named users' credentials (every user's without names); a named user without any is left
    out, as kafka-configs.sh leaves it out (DescribeUserScramCredentialsResult.users)."""
    client = cluster.bootstrap
    cls = client.request_type(DESCRIBE_USER_SCRAM_CREDENTIALS)
    user_cls = nested_type(cls, "UserName")
    names = None if users is None else tuple(build(user_cls, name=u) for u in dict.fromkeys(users))
    response = await client.send(build(cls, users=names or None))
    if response.error_code != ErrorCode.none:
        raise _refused("describe SCRAM credentials", response)
    described = []
    for result in response.results:
        if result.error_code == ErrorCode.resource_not_found:
            continue
        if result.error_code != ErrorCode.none:
            raise _refused(f"describe the SCRAM credentials of user '{result.user}'", result)
        infos = tuple(
            (MECHANISM_NAMES.get(info.mechanism, "UNKNOWN"), info.iterations)
            for info in result.credential_infos
        )
        described.append(UserScramCredentials(result.user, infos))
    return described


def scram_upsertions(configs: Mapping[str, str]) -> dict[str, tuple[int, str]]:
    """--add-config values for a user: mechanism -> (iterations, password); anything but a SCRAM
    mechanism is refused with kafka-configs.sh's sentence (quotas go to ops.client_quotas)."""
    _only_mechanisms(configs, "added")
    return {name: parse_user_credential(name, value) for name, value in configs.items()}


def scram_deletions(names: Iterable[str]) -> list[str]:
    """--delete-config names for a user: SCRAM mechanisms only, as kafka-configs.sh requires."""
    names = list(dict.fromkeys(names))
    _only_mechanisms(names, "deleted")
    return names


def _only_mechanisms(names: Iterable[str], done: str) -> None:
    unknown = [name for name in names if name not in MECHANISMS]
    if unknown:
        raise ScramError(
            f"Only quota and SCRAM credential configs can be {done} for 'users' using --bootstrap-server. "
            f"Unexpected config names: {', '.join(unknown)}; kcli handles the SCRAM ones "
            f"({', '.join(MECHANISMS)})."
        )


async def alter_user_scram_credentials(
    cluster: Cluster,
    user: str,
    *,
    upsertions: Mapping[str, tuple[int, str]] | None = None,
    deletions: Iterable[str] = (),
) -> None:
    """Set (mechanism -> (iterations, password)) and delete (mechanism names) one user's credentials
    with one AlterUserScramCredentials; a refusal raises ScramError with the controller's reason."""
    upsertions = dict(upsertions or {})
    deletions = list(deletions)
    if not upsertions and not deletions:
        raise ScramError("give at least one SCRAM credential to add or delete.")
    client = await cluster.least_loaded_or_active_controller()
    cls = client.request_type(ALTER_USER_SCRAM_CREDENTIALS)
    deletion_cls = nested_type(cls, "ScramCredentialDeletion")
    upsertion_cls = nested_type(cls, "ScramCredentialUpsertion")
    ups = []
    for mechanism, (iterations, password) in upsertions.items():
        salt = random_salt()
        ups.append(
            upsertion_cls(
                name=user,
                mechanism=MECHANISMS[mechanism][0],
                iterations=iterations,
                salt=salt,
                salted_password=salted_password(mechanism, password, salt, iterations),
            )
        )
    dels = tuple(deletion_cls(name=user, mechanism=MECHANISMS[m][0]) for m in deletions)
    response = await client.send(cls(deletions=dels, upsertions=tuple(ups)))
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise _refused(f"alter the SCRAM credentials of user '{result.user}'", result)


def _refused(what: str, answer: Any) -> ScramError:
    """One sentence: what could not be done and the broker's reason (its message, else the code's name)."""
    reason = answer.error_message or ErrorCode(answer.error_code).name.upper()
    return ScramError(f"cannot {what}: {reason.rstrip('.')}.")
