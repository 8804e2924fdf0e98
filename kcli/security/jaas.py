"""`sasl.jaas.config` values: one JAAS login module line and its options.

    org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="...";

Read as Kafka's JaasConfig reads it, with java.io.StreamTokenizer's rules: `//` and `/* */` comments
(and a lone `/`, which comments out the rest of its line), values quoted with `"` or `'` (with Java's
escapes, `\\t`, `\\"`, octal `\\101`, ...) or bare words of letters, digits and `.-_$` that do not start
with a digit. An entry is `<LoginModule class> <control flag> (<name>=<value>)* ;`. As in Kafka's
JaasContext, a client's `sasl.jaas.config` and a broker's (per listener and mechanism) hold exactly one
login module; the options go to the mechanism (username, password, user_<name> for PLAIN on a broker,
unsecuredLoginStringClaim_sub, ...).

kcli runs Kafka's own login modules only (`LOGIN_MODULES`); Kerberos is refused. Errors are one
sentence that starts with the key (or file and key) the line came from and never shows a value: a
misplaced word is named only when it is a known option name, else by its place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kcli.security.sasl import GSSAPI_REFUSAL

FLAGS = ("required", "requisite", "sufficient", "optional")

KERBEROS_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": ("OAUTHBEARER",),
}
"""Kafka's login modules and the mechanisms each can feed: Plain and Scram modules both put the
username and password on the Subject, so Kafka takes either for PLAIN or SCRAM."""


class JaasError(ValueError):
    """A `sasl.jaas.config` value that is not one login module line kcli runs, in one sentence."""


@dataclass(frozen=True)
class JaasConfig:
    login_module: str
    flag: str
    """The control flag, lower case."""
    options: dict[str, str] = field(repr=False)


def parse_jaas_config(text: str, *, source: str = "sasl.jaas.config") -> JaasConfig:
    """The login module, control flag and options of a one-module JAAS line; JaasError otherwise.

    `source` names where the line came from (a key, or a file and key) at the start of each error."""

    def fail(sentence: str) -> JaasError:
        return JaasError(f"{source}: {sentence}")

    tokens = _tokens(text)
    entries: list[JaasConfig] = []
    i = 0
    while i < len(tokens):
        module = tokens[i].word
        if module is None:
            raise fail("the login module class is not given.")
        i += 1
        if i == len(tokens):
            raise fail("the login module control flag (required) is not given.")
        flag = tokens[i].word
        if flag is None or flag.lower() not in FLAGS:
            raise fail("the login module control flag must be required, requisite, sufficient or optional.")
        i += 1
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i].char != ";":
            key = tokens[i].word
            if key is None or i + 2 >= len(tokens) or tokens[i + 1].char != "=" or tokens[i + 2].word is None:
                raise fail(
                    f"{_option_named(key, len(options))} is not name=value (quote values that start with a "
                    "digit or hold characters other than letters, digits and .-_$)."
                )
            options[key] = tokens[i + 2].word or ""
            i += 3
        if i == len(tokens):
            raise fail("the login module entry is not ended by a semicolon.")
        i += 1
        entries.append(JaasConfig(module, flag.lower(), options))
    if not entries:
        raise fail("no login module is given.")
    if len(entries) > 1:
        raise fail(f"{len(entries)} login modules are given; it takes exactly one.")
    config = entries[0]
    if config.login_module == KERBEROS_MODULE:
        raise fail(GSSAPI_REFUSAL)
    if config.login_module not in LOGIN_MODULES:
        known = ", ".join(LOGIN_MODULES)
        module = config.login_module
        dotted = re.fullmatch(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)+", module)
        shown = module if dotted or re.fullmatch(r"[A-Za-z_$][\w$]*LoginModule", module) else "given"
        raise fail(f"the login module {shown} is not supported by kcli; use one of {known}.")
    return config


def check_mechanism(config: JaasConfig, mechanism: str, *, source: str = "sasl.jaas.config") -> None:
    """JaasError unless the line's login module can feed SASL `mechanism` (see LOGIN_MODULES)."""
    if mechanism not in LOGIN_MODULES.get(config.login_module, ()):
        raise JaasError(
            f"{source}'s {config.login_module.rsplit('.', 1)[-1]} cannot log in with SASL mechanism {mechanism}."
        )


_OPTION_NAMES = re.compile(
    r"username|password|clientId|clientSecret|scope|unsecuredLogin\w+|unsecuredValidator\w+|extension_\w+|tokenauth"
)


def _option_named(key: str | None, index: int) -> str:
    """How an error names a JAAS option: by its name when it is a known one, else by its place (a
    misquoted value would otherwise be echoed as a name)."""
    if key is not None and _OPTION_NAMES.fullmatch(key):
        return f"option {key}"
    return f"option {index + 1}"


@dataclass(frozen=True, slots=True)
class _Token:
    word: str | None = None
    """A word or quoted string's text."""
    char: str | None = None
    """An ordinary character (=, ;, ...) or a number, which carries no text."""


def _tokens(text: str) -> list[_Token]:
    """StreamTokenizer as JaasConfig sets it up: its default syntax, `-_$` as word characters, and
    slash-slash and slash-star comments."""
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c == "/":  # `//` and a lone `/` (StreamTokenizer's comment character) run to the end of line
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif c in "\"'":
            value, i = _quoted(text, i + 1, c)
            tokens.append(_Token(word=value))
        elif (
            c.isdigit()
            or c == "."
            or (c == "-" and i + 1 < n and (text[i + 1].isdigit() or text[i + 1] == "."))
        ):
            i += 1
            while i < n and (text[i].isdigit() or text[i] == "."):
                i += 1
            tokens.append(_Token(char="number"))
        elif _is_word_char(c) and c != "-":
            start = i
            while i < n and (_is_word_char(text[i]) or text[i].isdigit() or text[i] == "."):
                i += 1
            tokens.append(_Token(word=text[start:i]))
        else:
            tokens.append(_Token(char=c))
            i += 1
    return tokens


def _is_word_char(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or c in "-_$" or ord(c) >= 0xA0


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _quoted(text: str, i: int, quote: str) -> tuple[str, int]:
    """A quoted string from just after its opening quote: StreamTokenizer's escapes; it ends at the
    matching quote, or (unterminated) at the end of the line."""
    out: list[str] = []
    n = len(text)
    while i < n and text[i] != quote and text[i] not in "\r\n":
        c = text[i]
        i += 1
        if c == "\\" and i < n:
            c = text[i]
            i += 1
            if c in "01234567":
                digits = c
                limit = 3 if c <= "3" else 2
                while len(digits) < limit and i < n and text[i] in "01234567":
                    digits += text[i]
                    i += 1
                c = chr(int(digits, 8))
            else:
                c = _ESCAPES.get(c, c)
        out.append(c)
    if i < n and text[i] == quote:
        i += 1
    return "".join(out), i
