"""The client mechanism a `ClientSecurity` asks for: its `sasl.mechanism` and JAAS options.

Kafka's login modules take the credentials: PlainLoginModule and ScramLoginModule `username` and
`password`, OAuthBearerLoginModule the unsecuredLogin* options or, with
`sasl.oauthbearer.token.endpoint.url`, a token fetched by the client-credentials grant.
"""

from __future__ import annotations

from kcli.security import ClientSecurity
from kcli.security.sasl import SaslClientMechanism, SaslError, check_mechanism
from kcli.security.sasl.oauthbearer import OAuthBearerClient, Token, extensions_from_jaas, unsecured_token
from kcli.security.sasl.plain import PlainClient
from kcli.security.sasl.scram import TOKEN_AUTH, ScramClient
from kcli.security.sasl.token_endpoint import URL_KEY, fetch_token


def client_mechanism(security: ClientSecurity) -> SaslClientMechanism:
    """A fresh mechanism for one (re-)authentication; blocking when a token endpoint is asked (call off-loop)."""
    mechanism = security.sasl_mechanism
    check_mechanism(mechanism)
    jaas = security.jaas
    if mechanism == "OAUTHBEARER":
        url = security.sasl.get(URL_KEY)
        token: Token = fetch_token(url, jaas) if url else unsecured_token(jaas)
        return OAuthBearerClient(token, extensions_from_jaas(jaas))
    username, password = jaas.get("username"), jaas.get("password")
    if not username or password is None:
        raise SaslError(f"SASL/{mechanism} needs username and password in sasl.jaas.config.")
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    extensions = {TOKEN_AUTH: "true"} if jaas.get(TOKEN_AUTH, "").lower() == "true" else {}
    return ScramClient(mechanism, username, password, extensions=extensions)


def needs_io(security: ClientSecurity) -> bool:
    """Whether making the mechanism talks to a token endpoint (run it in a thread)."""
    return security.sasl_mechanism == "OAUTHBEARER" and bool(security.sasl.get(URL_KEY))
