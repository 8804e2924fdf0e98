"""An OAuth 2 access token by the client-credentials grant, as Kafka's OAUTHBEARER login does it.

`sasl.oauthbearer.token.endpoint.url` names the endpoint; the JAAS options `clientId`, `clientSecret`
and `scope` go in an HTTP basic header and a form POST (Kafka's HttpAccessTokenRetriever), and the JSON
answer's `access_token` and `expires_in` make the token. Blocking I/O: callers run it off the event loop.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping

from kcli.security.sasl import SaslError
from kcli.security.sasl.oauthbearer import Token

URL_KEY = "sasl.oauthbearer.token.endpoint.url"


def fetch_token(url: str, options: Mapping[str, str], *, timeout: float = 10.0) -> Token:
    """POST grant_type=client_credentials (and scope) to `url`; SaslError in one sentence otherwise."""
    client_id = options.get("clientId", "")
    secret = options.get("clientSecret", "")
    if not client_id or not secret:
        raise SaslError("OAUTHBEARER with a token endpoint needs the JAAS options clientId and clientSecret.")
    # here, not at the top: http.client and email cost every client and broker process ~10 ms at start,
    # and only OAUTHBEARER with a token endpoint asks for them
    import urllib.error
    import urllib.parse
    import urllib.request

    form = {"grant_type": "client_credentials"}
    if options.get("scope"):
        form["scope"] = options["scope"]
    basic = base64.b64encode(
        f"{urllib.parse.quote(client_id)}:{urllib.parse.quote(secret)}".encode()
    ).decode()
    request = urllib.request.Request(
        url,
        data=urllib.parse.urlencode(form).encode(),
        headers={
            "Authorization": f"Basic {basic}",
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 (the URL is the user's)
            body = answer.read(1 << 20)
    except urllib.error.HTTPError as exc:
        raise SaslError(f"the token endpoint {url} answered HTTP {exc.code} {exc.reason}.") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SaslError(f"cannot get a token from {url}: {reason}.") from None
    try:
        payload = json.loads(body)
        value = payload["access_token"]
    except (ValueError, KeyError, TypeError):
        raise SaslError(f"the token endpoint {url} did not answer JSON with an access_token.") from None
    if not isinstance(value, str) or not value:
        raise SaslError(f"the token endpoint {url} answered an empty access_token.")
    expires_in = payload.get("expires_in")
    lifetime = None
    if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool):
        lifetime = int(time.time() * 1000 + expires_in * 1000)
    return Token(value, _subject(value) or client_id, lifetime)


def _subject(value: str) -> str | None:
    """The `sub` of a JWT access token, when it is one (only for messages: the broker decides)."""
    parts = value.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    sub = claims.get("sub") if isinstance(claims, dict) else None
    return sub if isinstance(sub, str) else None
