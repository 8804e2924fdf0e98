"""`sasl.jaas.config` values: one JAAS login module line and its options.

    org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="...";

Kafka reads this with its JaasConfig parser (a StreamTokenizer): a class name, a control flag, then
`name=value` options, values quoted or bare, ending in `;`. Only one login module is allowed in
`sasl.jaas.config`. The options go to the mechanism (username, password, user_<name> on a broker,
unsecuredLoginStringClaim_sub, ...); the password is never shown back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))', re.S)


class JaasError(ValueError):
    """A `sasl.jaas.config` value that is not one login module line."""


@dataclass(frozen=True)
class JaasConfig:
    login_module: str
    flag: str
    options: dict[str, str] = field(repr=False)


def parse_jaas_config(text: str) -> JaasConfig:
    """The login module, its control flag and its options; JaasError (one sentence) otherwise."""
    tokens: list[tuple[str, str]] = []  # (kind, text): kind is "word", "quoted", "=" or ";"
    position = 0
    text = text.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            if text[position:].strip() == "":
                break
            raise JaasError(f"sasl.jaas.config cannot be read at character {position + 1}.")
        position = match.end()
        quoted, word, equals, semicolon = match.groups()
        if quoted is not None:
            tokens.append(("quoted", re.sub(r"\\(.)", r"\1", quoted)))
        elif word is not None:
            tokens.append(("word", word))
        elif equals is not None:
            tokens.append(("=", "="))
        else:
            tokens.append((";", ";"))
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[-1][0] != ";":
        raise JaasError(
            "sasl.jaas.config must be one login module line: <LoginModule class> required <option>=<value> ... ;"
        )
    module, flag = tokens[0][1], tokens[1][1].lower()
    if tokens[1][0] != "word" or flag not in FLAGS:
        raise JaasError(f"sasl.jaas.config: the control flag of {module} must be one of {', '.join(FLAGS)}.")
    options: dict[str, str] = {}
    rest = tokens[2:-1]
    for i in range(0, len(rest), 3):
        name, equals, value = (rest[i : i + 3] + [("", "")] * 3)[:3]
        if ";" in (name[0], equals[0], value[0]):
            raise JaasError("sasl.jaas.config must hold exactly one login module.")
        if name[0] != "word" or equals[0] != "=" or value[0] not in ("word", "quoted"):
            which = (
                f"option {name[1]!r}" if name[0] == "word" else "an option"
            )  # a stray value may be a secret
            raise JaasError(f"sasl.jaas.config: {which} of {module} is not of the form name=value.")
        options[name[1]] = value[1]
    return JaasConfig(module, flag, options)
