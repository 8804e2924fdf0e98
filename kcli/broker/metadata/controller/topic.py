"""Kafka's `Topic.validate`: the rules a topic name follows, shared by topic creation and config checks."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.controller.controller_result import ApiError

MAX_TOPIC_NAME_LENGTH = 249


def topic_name_error(name: str) -> ApiError | None:
    """Topic.validate's sentences, as INVALID_TOPIC_EXCEPTION."""
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name == ".":
        reason = "'.' is not allowed"
    elif name == "..":
        reason = "'..' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not all(c.isascii() and (c.isalnum() or c in "._-") for c in name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason is None:
        return None
    return ApiError(ErrorCode.invalid_topic_exception, f"Topic name is invalid: {reason}")
