"""Kafka's SaslServerAuthenticator: what a SASL listener's connection must do before its requests count.

A connection on a SASL_PLAINTEXT listener starts here, not at the broker's handler. Before it has
authenticated only ApiVersions and SaslHandshake (v0-1) pass; any other request closes it (Kafka's
IllegalSaslStateException), and so does a frame above `sasl.server.max.receive.size`. After a
SaslHandshake v1 the mechanism's tokens come in SaslAuthenticate requests (v0-2); after a v0 handshake
they come as raw size-prefixed frames, as Kafka still allows. A failed authentication is answered
SASL_AUTHENTICATION_FAILED (or UNSUPPORTED_SASL_MECHANISM, with the enabled list) after
`connection.failed.authentication.delay.ms`, and the connection is closed.

Once authenticated the principal `User:<name>` is on the connection's `ConnectionInfo` and every frame
goes to the broker's handler. `connections.max.reauth.ms` (or an OAUTHBEARER token's expiry) bounds the
session (KIP-368): the answer tells the client its `session_lifetime_ms`, a SaslHandshake on the
authenticated connection starts a re-authentication that must keep the mechanism and the principal, and
a request that arrives after the session expired closes the connection.

SCRAM credentials are looked up through `CredentialLookup` (mechanism, user) -> ScramCredential | None,
which the broker hands the network layer (`SocketServer.scram_credentials`): as Kafka's CredentialCache
(fed by its ScramPublisher), what the node's current metadata image holds (UserScramCredentialRecord,
written by AlterUserScramCredentials or `kcli storage format --add-scram`), read at each authentication.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from kcli.broker.apis.context import ConnectionInfo
from kcli.broker.apis.dispatch import Answer
from kcli.config import BrokerConfig, ConfigError
from kcli.config.broker_config import OAUTHBEARER_KEYS
from kcli.protocol.messages import api_name, request_type, response_type
from kcli.protocol.request_header import InvalidRequestError, decode_request, read_request_header
from kcli.protocol.response_header import encode_response
from kcli.security.jaas import parse_jaas_config
from kcli.security.sasl import (
    SaslAuthenticationError,
    SaslCredentialError,
    SaslError,
    SaslServerMechanism,
)
from kcli.security.sasl.oauthbearer import AccessTokenValidator, OAuthBearerServer, UnsecuredValidator
from kcli.security.sasl.plain import PlainServer, users_from_jaas
from kcli.security.sasl.scram import CredentialLookup, ScramServer
from kcli.security.scram import MECHANISMS as SCRAM_MECHANISMS

log = logging.getLogger("kcli.broker")

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
HANDSHAKE_VERSIONS = (0, 1)
AUTHENTICATE_VERSIONS = (0, 2)

RequestHandler = Callable[[ConnectionInfo, bytes], Coroutine[Any, Any, Answer]]
_KEY = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class AuthenticatingConnection(Protocol):
    """What the authenticator asks of its connection (`connection.Connection`)."""

    max_frame: int
    max_frame_key: str

    def close_after_answer(self) -> None: ...


@dataclass(frozen=True)
class SaslListener:
    """One SASL listener's settings, read once at start-up (listener- and mechanism-prefixed keys first)."""

    name: str
    enabled: tuple[str, ...]
    jaas: Mapping[str, Mapping[str, str]] = field(repr=False)
    """Mechanism -> the options of its `sasl.jaas.config`."""
    reauth_ms: Mapping[str, int]
    max_receive: int
    failed_delay_s: float
    plain_users: Callable[[str, str], bool] = field(repr=False)
    validator: AccessTokenValidator
    """OAUTHBEARER's: Kafka's unsecured one, or the JWKS one its server callback handler names."""

    @classmethod
    def from_config(cls, config: BrokerConfig, name: str) -> SaslListener:
        enabled = tuple(config.listener_value(name, "sasl.enabled.mechanisms"))  # type: ignore[call-overload]
        jaas: dict[str, Mapping[str, str]] = {}
        for mechanism in enabled:
            text = config.listener_value(name, "sasl.jaas.config", mechanism)
            source = config.listener_key(name, "sasl.jaas.config", mechanism)
            jaas[mechanism] = parse_jaas_config(str(text), source=source).options if text is not None else {}
        return cls(
            name=name,
            enabled=enabled,
            jaas=jaas,
            reauth_ms={m: int(config.listener_value(name, "connections.max.reauth.ms", m)) for m in enabled},  # type: ignore[call-overload]
            max_receive=int(config.listener_value(name, "sasl.server.max.receive.size")),  # type: ignore[call-overload]
            failed_delay_s=int(config["connection.failed.authentication.delay.ms"]) / 1000,  # type: ignore[call-overload]
            plain_users=users_from_jaas(jaas.get("PLAIN", {})),
            validator=_oauthbearer_validator(config, name, jaas.get("OAUTHBEARER", {}))
            if "OAUTHBEARER" in enabled
            else UnsecuredValidator(),
        )

    def server_mechanism(self, mechanism: str, credentials: CredentialLookup) -> SaslServerMechanism:
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        if mechanism in SCRAM_MECHANISMS:
            return ScramServer(mechanism, credentials)
        return OAuthBearerServer(self.validator)


def _oauthbearer_validator(
    config: BrokerConfig, listener: str, jaas: Mapping[str, str]
) -> AccessTokenValidator:
    """`listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`: Kafka's validator reads the
    JWKS (a file or an endpoint that cannot be read stops the start, in one sentence); unset, the
    unsecured one."""
    # Imported here: the JWT checks bring cryptography and urllib (~15 ms), which a broker without an
    # OAUTHBEARER listener never needs, and every broker start would pay.
    from kcli.security.sasl.jwt_validator import SERVER_HANDLERS, ValidatorAccessTokenValidator

    handler = config.listener_value(listener, "sasl.server.callback.handler.class", "OAUTHBEARER")
    if handler not in SERVER_HANDLERS:
        return UnsecuredValidator.from_jaas(jaas)
    settings = {key: config.listener_value(listener, key) for key in OAUTHBEARER_KEYS}
    try:
        return ValidatorAccessTokenValidator.from_config(settings)
    except SaslError as exc:
        raise ConfigError(f"listener {listener}, OAUTHBEARER: {exc}") from None


class SaslServerAuthenticator:
    """One connection's SASL state; `handle` stands in for the broker's handler (the network seam)."""

    def __init__(
        self,
        connection: AuthenticatingConnection,
        listener: SaslListener,
        credentials: Callable[[], CredentialLookup],
        downstream: RequestHandler,
    ) -> None:
        self._connection = connection
        self._listener = listener
        self._credentials = credentials
        self._downstream = downstream
        self._state = "handshake"
        self._raw_tokens = False  # after a SaslHandshake v0: tokens without the SaslAuthenticate wrapper
        self._mechanism: SaslServerMechanism | None = None
        self._mechanism_name = ""
        self._principal: str | None = None
        self._reauthenticating = False
        self._bad_reauth_mechanism: str | None = None
        self._supports_reauth = False
        self._session_expires: float | None = None
        self._normal_max_frame = connection.max_frame
        self._normal_max_key = connection.max_frame_key
        connection.max_frame = listener.max_receive
        connection.max_frame_key = "sasl.server.max.receive.size"

    async def handle(self, info: ConnectionInfo, frame: bytes) -> Answer:
        if self._state == "complete":
            # as Kafka's Processor: a SaslHandshake begins a re-authentication even after the session
            # expired (the client waits for its requests in flight first); anything else then closes.
            # A session without an expiry cannot re-authenticate (KafkaChannel): the handshake goes on to
            # the handler, which answers ILLEGAL_SASL_STATE.
            if (
                len(frame) >= 2
                and _KEY.unpack_from(frame)[0] == SASL_HANDSHAKE
                and self._supports_reauth
                and self._session_expires is not None
            ):
                self._begin_reauthentication()
            elif self._session_expires is not None and time.monotonic() > self._session_expires:
                raise InvalidRequestError(
                    f"the SASL session of {info.principal} expired without re-authentication"
                )
            else:
                return await self._downstream(info, frame)
        if self._state == "authenticate" and self._raw_tokens:
            return await self._raw_token(info, frame)
        api_key, version, correlation_id, _, offset = read_request_header(frame)
        if self._state == "handshake":
            if api_key == API_VERSIONS and not self._reauthenticating:
                return await self._downstream(info, frame)
            if api_key != SASL_HANDSHAKE:
                raise InvalidRequestError(
                    f"Unexpected Kafka request of type {api_name(api_key)} during SASL handshake."
                )
            _check_version(api_key, version, HANDSHAKE_VERSIONS)
            request = decode_request("SaslHandshake", api_key, version, frame, offset)
            return await self._handshake(info, request.mechanism, version, correlation_id)  # type: ignore[attr-defined]
        if self._state != "authenticate":
            raise InvalidRequestError(f"request during SASL state {self._state}")
        if api_key != SASL_AUTHENTICATE:
            raise InvalidRequestError(
                f"Unexpected Kafka request of type {api_name(api_key)} during SASL authentication."
            )
        _check_version(api_key, version, AUTHENTICATE_VERSIONS)
        self._supports_reauth = self._supports_reauth or version > 0
        request = decode_request("SaslAuthenticate", api_key, version, frame, offset)
        return await self._authenticate(info, request.auth_bytes, version, correlation_id)  # type: ignore[attr-defined]

    def _begin_reauthentication(self) -> None:
        """KIP-368: a SaslHandshake on an authenticated connection; other requests wait on the client's side."""
        self._state = "handshake"
        self._reauthenticating = True
        self._connection.max_frame = self._listener.max_receive
        self._connection.max_frame_key = "sasl.server.max.receive.size"

    async def _handshake(
        self, info: ConnectionInfo, mechanism: str, version: int, correlation_id: int
    ) -> Answer:
        enabled = self._listener.enabled
        answer_type = response_type(SASL_HANDSHAKE, version)
        if mechanism not in enabled:
            answer = answer_type(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
            return await self._fail(
                info,
                encode_response(correlation_id, SASL_HANDSHAKE, answer),
                f"Unsupported SASL mechanism {mechanism}",
            )
        if self._reauthenticating and mechanism != self._mechanism_name:
            self._bad_reauth_mechanism = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication "
                f"of mechanism '{self._mechanism_name}'"
            )
        else:
            self._mechanism_name = mechanism
            self._mechanism = self._listener.server_mechanism(mechanism, self._credentials())
        self._raw_tokens = version == 0
        self._state = "authenticate"
        return encode_response(
            correlation_id, SASL_HANDSHAKE, answer_type(error_code=ErrorCode.none, mechanisms=enabled)
        )

    async def _authenticate(
        self, info: ConnectionInfo, token: bytes, version: int, correlation_id: int
    ) -> Answer:
        answer_type = response_type(SASL_AUTHENTICATE, version)
        try:
            reply = self._evaluate(token)
        except SaslError as exc:
            message = self._client_message(exc)
            answer = answer_type(
                error_code=ErrorCode.sasl_authentication_failed, error_message=message, auth_bytes=b""
            )
            return await self._fail(info, encode_response(correlation_id, SASL_AUTHENTICATE, answer), message)
        lifetime_ms = self._complete(info) if self._mechanism is not None and self._mechanism.complete else 0
        fields: dict[str, object] = {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": reply}
        if version >= 1:
            fields["session_lifetime"] = datetime.timedelta(milliseconds=lifetime_ms)
        return encode_response(correlation_id, SASL_AUTHENTICATE, answer_type(**fields))

    async def _raw_token(self, info: ConnectionInfo, token: bytes) -> Answer:
        """After a SaslHandshake v0 the tokens travel bare; a failure just closes (there is no error field)."""
        try:
            reply = self._evaluate(token)
        except SaslError as exc:
            self._state = "failed"
            log.info("Failed authentication with %s (%s)", info.peer, printable(self._client_message(exc)))
            await asyncio.sleep(self._listener.failed_delay_s)
            raise InvalidRequestError("SASL authentication failed") from None
        if self._mechanism is not None and self._mechanism.complete:
            self._complete(info)
        return _INT32.pack(len(reply)) + reply

    def _evaluate(self, token: bytes) -> bytes:
        if self._bad_reauth_mechanism is not None:
            raise SaslAuthenticationError(self._bad_reauth_mechanism)
        assert self._mechanism is not None
        try:
            reply = self._mechanism.evaluate_response(token)
        except SaslError:
            raise
        except Exception as exc:  # a token no mechanism rule foresaw: a failed login, not a broker fault
            log.debug("SASL/%s could not evaluate a token", self._mechanism_name, exc_info=exc)
            raise SaslCredentialError("Authentication failed: Credentials could not be obtained") from None
        if self._mechanism.complete and self._reauthenticating:
            principal = f"User:{self._mechanism.authorization_id}"
            if principal != self._principal:
                previous = (self._principal or "User:").replace(":", ".", 1)
                raise SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from {previous}: "
                    f"{principal.replace(':', '.', 1)}"
                )
        return reply

    def _client_message(self, exc: SaslError) -> str:
        """Kafka keeps a SaslException's text from the client (it may tell whether the user exists)."""
        if isinstance(exc, SaslAuthenticationError):
            return str(exc)
        what = "re-authentication" if self._reauthenticating else "authentication"
        log.debug("SASL %s failed: %s", what, exc)
        return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {self._mechanism_name}"

    def _complete(self, info: ConnectionInfo) -> int:
        """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs; the principal goes on the connection."""
        mechanism = self._mechanism
        assert mechanism is not None
        self._principal = info.principal = f"User:{mechanism.authorization_id}"
        self._state = "complete"
        self._reauthenticating = False
        self._connection.max_frame = self._normal_max_frame
        self._connection.max_frame_key = self._normal_max_key
        credential_expires = mechanism.credential_lifetime_ms
        max_reauth = self._listener.reauth_ms.get(self._mechanism_name, 0)
        if credential_expires is None and max_reauth <= 0:
            self._session_expires = None
            return 0
        lifetime = max_reauth if max_reauth > 0 else None
        if credential_expires is not None:
            remaining = credential_expires - int(time.time() * 1000)
            lifetime = remaining if lifetime is None else min(lifetime, remaining)
        lifetime = max(0, lifetime or 0)
        self._session_expires = time.monotonic() + lifetime / 1000
        return lifetime

    async def _fail(self, info: ConnectionInfo, answer: bytes, message: str) -> Answer:
        """Kafka's delayed close on a failed authentication: wait, answer, close."""
        self._state = "failed"
        log.info("Failed authentication with %s (%s)", info.peer, printable(message))
        await asyncio.sleep(self._listener.failed_delay_s)
        self._connection.close_after_answer()
        return answer


def _check_version(api_key: int, version: int, versions: tuple[int, int]) -> None:
    if not versions[0] <= version <= versions[1]:
        raise InvalidRequestError(f"Version {version} is not supported for apiKey {api_name(api_key)}")
    request_type(api_key, version)  # kio has it (checked once more by decode_request)


def printable(text: str) -> str:
    """`text` with control characters escaped: what an unauthenticated client sends (a mechanism name,
    a user name) reaches the log, and must not start a log line of its own."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
