"""Produce on the wire by hand: requests framed and answers read for a client's hot path, answers
written for the broker's.

Produce is the one request whose body is almost all record bytes, sent and answered thousands of times a
second (`kcli replay` sends one record batch per request). Through kio each request builds three levels of
dataclasses and copies its records, and each answer does the same to carry an error code and an offset.

Client side: what does not change from one request to the next is packed once per connection
(`ProduceFramer`): a request is a small prefix, the records as they are, and a fixed suffix. An answer
about one partition is read in one pass (`read_produce_answer`); any other answer is left to kio
(`answer_from_response`).

Broker side: `write_produce_response` packs an answer in which no partition carries record errors or
a new leader (the rare others still go through kio). Requests are read by kio: measured, a reader by
hand was no faster (~6 us for a 16 KiB request either way), copy of the records included.

Layouts are Kafka's ProduceRequest.json and ProduceResponse.json from v3 (the first version with a
transactional id, which record batches of magic v2 need) to v13: flexible from v9 (compact strings,
arrays and bytes, tagged fields, request header v2 and response header v1), topics named by id from
v13. Nothing here does I/O.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from formats.wire import (
    read_array_length,
    read_nullable_string,
    read_uvarint,
    skip_tagged_fields,
    uvarint,
    write_array_length,
    write_legacy_string,
    write_nullable_string,
)

PRODUCE = 0
FIRST_VERSION = 3
LAST_VERSION = 13
FIRST_FLEXIBLE_VERSION = 9
FIRST_TOPIC_ID_VERSION = 13


class ProducePartitionAnswer(NamedTuple):
    """What a broker answered about one partition of a Produce request, with kio's field names."""

    index: int
    error_code: ErrorCode
    base_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int  # -1 before v5
    error_message: str | None  # None before v8


class ProduceFramer:
    """Frames of Produce requests to one topic at one version, one partition's records per request.

    The bytes between the correlation id and the partition index (client id, transactional id, acks,
    timeout, topic) are packed once; a request costs one struct.pack for its prefix.
    """

    def __init__(
        self,
        version: int,
        *,
        client_id: str | None,
        acks: int,
        timeout_ms: int,
        topic: str | None = None,
        topic_id: uuid.UUID | None = None,
        transactional_id: str | None = None,
    ) -> None:
        if not FIRST_VERSION <= version <= LAST_VERSION:
            raise ValueError(f"Produce v{version} is not framed here (v{FIRST_VERSION}-v{LAST_VERSION} are)")
        if version >= FIRST_TOPIC_ID_VERSION and topic_id is None:
            raise ValueError(f"Produce v{version} names its topic by id: give topic_id")
        if version < FIRST_TOPIC_ID_VERSION and topic is None:
            raise ValueError(f"Produce v{version} names its topic: give topic")
        self.version = version
        self.flexible = flexible = version >= FIRST_FLEXIBLE_VERSION
        static = bytearray()
        write_legacy_string(static, client_id)  # header v1/v2: never compact
        if flexible:
            static += b"\0"  # request header v2: no tagged fields
        write_nullable_string(static, transactional_id, flexible)
        static += struct.pack(">hi", acks, timeout_ms)
        write_array_length(static, 1, flexible)
        if version >= FIRST_TOPIC_ID_VERSION:
            assert topic_id is not None
            static += topic_id.bytes
        else:
            assert topic is not None
            write_nullable_string(static, topic, flexible)
        write_array_length(static, 1, flexible)
        # size, api key, api version, correlation id, the static bytes, partition index, then the
        # records' length: an int32, or a varint of one to three bytes (records below 2 MiB)
        head = f">ihhi{len(static)}si"
        self._head = struct.Struct(head)
        self._heads = (
            [struct.Struct(head + "i")]
            if not flexible
            else [struct.Struct(head + "B" * n) for n in (1, 2, 3)]
        )
        self._static = bytes(static)
        self.suffix = b"\0\0\0" if flexible else b""  # tagged fields of partition, topic and request
        self._fixed_size = self._head.size - 4 + len(self.suffix)
        self._expect_answer(topic, topic_id)

    def prefix(self, correlation_id: int, partition: int, records_size: int) -> bytes:
        """The frame up to the records: size, request header, body through the records' length."""
        size = self._fixed_size + records_size
        if not self.flexible:
            return self._heads[0].pack(
                size + 4, PRODUCE, self.version, correlation_id, self._static, partition, records_size
            )
        n = records_size + 1
        if n < 0x80:
            length: tuple[int, ...] = (n,)
        elif n < 0x4000:
            length = (n & 0x7F | 0x80, n >> 7)
        elif n < 0x200000:
            length = (n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14)
        else:
            varint = uvarint(n)
            head = self._head.pack(
                size + len(varint), PRODUCE, self.version, correlation_id, self._static, partition
            )
            return head + varint
        head_with_length = self._heads[len(length) - 1]
        return head_with_length.pack(
            size + len(length), PRODUCE, self.version, correlation_id, self._static, partition, *length
        )

    def frame(self, correlation_id: int, partition: int, records: bytes | bytearray | memoryview) -> bytes:
        """The whole frame in one piece (a copy of the records: prefix() and suffix avoid it)."""
        return b"".join((self.prefix(correlation_id, partition, len(records)), records, self.suffix))

    def read_answer(self, frame: bytes) -> ProducePartitionAnswer | None:
        """The answer in a ProduceResponse frame to one of these requests (None: leave it to kio).

        The usual answer (this topic, one partition, no record errors, no error message, no tagged
        fields) is recognised by its fixed bytes and read with one struct; any other goes through
        read_produce_answer.
        """
        if (
            len(frame) == self._answer_size
            and frame.startswith(self._answer_head, 4)
            and frame.startswith(self._answer_tail, self._answer_tail_at)
            and (not self.flexible or frame[-1] == 0)
        ):
            if self.version >= 5:
                index, code, base_offset, append_time, start_offset = _PARTITION_V5.unpack_from(
                    frame, self._answer_at
                )
            else:
                index, code, base_offset, append_time = _PARTITION_V2.unpack_from(frame, self._answer_at)
                start_offset = -1
            error_code = _ERROR_CODES.get(code)
            if error_code is not None:
                return ProducePartitionAnswer(index, error_code, base_offset, append_time, start_offset, None)
        return read_produce_answer(frame, self.version)

    def _expect_answer(self, topic: str | None, topic_id: uuid.UUID | None) -> None:
        """The fixed bytes of the usual answer, before the partition's fields and after them."""
        flexible, version = self.flexible, self.version
        head = bytearray(b"\0" if flexible else b"")  # response header v1: no tagged fields
        write_array_length(head, 1, flexible)
        if version >= FIRST_TOPIC_ID_VERSION:
            assert topic_id is not None
            head += topic_id.bytes
        else:
            write_nullable_string(head, topic, flexible)
        write_array_length(head, 1, flexible)
        tail = bytearray()
        if version >= 8:
            write_array_length(tail, 0, flexible)  # record_errors
            write_nullable_string(tail, None, flexible)  # error_message
        if flexible:
            tail += b"\0\0"  # tagged fields of partition and topic
        self._answer_head = bytes(head)
        self._answer_at = 4 + len(head)
        self._answer_tail = bytes(tail)
        self._answer_tail_at = self._answer_at + (_PARTITION_V5 if version >= 5 else _PARTITION_V2).size
        # then throttle_time_ms, and the response's tagged fields when flexible
        self._answer_size = self._answer_tail_at + len(tail) + 4 + flexible


def read_produce_answer(frame: bytes | bytearray | memoryview, version: int) -> ProducePartitionAnswer | None:
    """The answer in a ProduceResponse frame (correlation id first) about one topic's one partition.

    None when the response is of another shape (several topics or partitions, record errors, an error
    code this kio does not know) or does not parse: kio then reads it, and says what is wrong.
    """
    try:
        return _read_answer(frame, version, version >= FIRST_FLEXIBLE_VERSION)
    except (struct.error, IndexError, ValueError):
        return None


def answer_from_response(response: Any) -> ProducePartitionAnswer:
    """The same answer from a ProduceResponse kio decoded; ValueError unless it is about one partition."""
    topics = response.responses
    if len(topics) != 1 or len(topics[0].partition_responses) != 1:
        counts = [len(t.partition_responses) for t in topics]
        raise ValueError(f"expected an answer about one partition of one topic, got partitions {counts}")
    answer = topics[0].partition_responses[0]
    append_time = getattr(answer, "log_append_time", None)
    return ProducePartitionAnswer(
        answer.index,
        answer.error_code,
        answer.base_offset,
        -1 if append_time is None else (append_time - _EPOCH) // _MILLISECOND,
        getattr(answer, "log_start_offset", -1),
        getattr(answer, "error_message", None),
    )


def write_produce_response(version: int, results: list[tuple[Any, list[tuple[int, Any]]]]) -> bytes | None:
    """The ProduceResponse body for `results`: (topic name, or id from v13, [(partition, outcome)]) in
    order, each outcome with the fields error, base_offset, log_append_time, log_start_offset,
    record_errors, error_message and current_leader (the broker's Outcome).

    None when an outcome carries record errors, an error message or a current leader: kio writes those.
    """
    flexible = version >= FIRST_FLEXIBLE_VERSION
    by_id = version >= FIRST_TOPIC_ID_VERSION
    out = bytearray()
    write_array_length(out, len(results), flexible)
    for key, outcomes in results:
        if by_id:
            out += _NULL_UUID if key is None else key.bytes
        else:
            write_nullable_string(out, key, flexible)
        write_array_length(out, len(outcomes), flexible)
        for index, outcome in outcomes:
            if (
                outcome.record_errors
                or outcome.error_message is not None
                or outcome.current_leader is not None
            ):
                return None
            if version >= 5:
                out += _PARTITION_V5.pack(
                    index,
                    outcome.error,
                    outcome.base_offset,
                    outcome.log_append_time,
                    outcome.log_start_offset,
                )
            else:
                out += _PARTITION_V2.pack(index, outcome.error, outcome.base_offset, outcome.log_append_time)
            if version >= 8:  # no record errors, a null error message
                out += b"\x01\x00\x00" if flexible else b"\x00\x00\x00\x00\xff\xff"
        if flexible:
            out += b"\x00"  # no tagged fields: the current leader is left out when it is the default
    out += b"\x00\x00\x00\x00"  # throttle time
    if flexible:
        out += b"\x00"  # no node endpoints
    return bytes(out)


# --- reading --------------------------------------------------------------------------------------


def _read_answer(
    frame: bytes | bytearray | memoryview, version: int, flexible: bool
) -> ProducePartitionAnswer | None:
    pos = 4  # correlation id
    if flexible:
        pos = skip_tagged_fields(frame, pos, len(frame))  # response header v1
    count, pos = read_array_length(frame, pos, flexible)
    if count != 1:
        return None
    if version >= FIRST_TOPIC_ID_VERSION:
        pos += 16
    elif flexible:
        length, pos = read_uvarint(frame, pos, len(frame))
        pos += length - 1
    else:
        pos += 2 + _INT16.unpack_from(frame, pos)[0]
    count, pos = read_array_length(frame, pos, flexible)
    if count != 1:
        return None
    index, code, base_offset = _PARTITION.unpack_from(frame, pos)
    pos += _PARTITION.size
    log_append_time_ms = log_start_offset = -1
    error_message = None
    if version >= 2:
        (log_append_time_ms,) = _INT64.unpack_from(frame, pos)
        pos += 8
    if version >= 5:
        (log_start_offset,) = _INT64.unpack_from(frame, pos)
        pos += 8
    if version >= 8:
        count, pos = read_array_length(frame, pos, flexible)
        if count != 0:
            return None  # record errors: kio reads them
        error_message, pos = read_nullable_string(frame, pos, flexible)
    if flexible:
        pos = skip_tagged_fields(frame, pos, len(frame))  # partition (current_leader)
        pos = skip_tagged_fields(frame, pos, len(frame))  # topic
    _INT32.unpack_from(frame, pos)  # throttle_time_ms (v1+): only checked to be there
    if flexible:
        skip_tagged_fields(frame, pos + 4, len(frame))  # node_endpoints
    error_code = _ERROR_CODES.get(code)
    if error_code is None:
        return None
    return ProducePartitionAnswer(
        index, error_code, base_offset, log_append_time_ms, log_start_offset, error_message
    )


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_NULL_UUID = bytes(16)
_PARTITION = struct.Struct(">ihq")  # index, error code, base offset
_PARTITION_V2 = struct.Struct(">ihqq")  # ... log_append_time_ms
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log_start_offset
_ERROR_CODES = {int(code): code for code in ErrorCode}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MILLISECOND = datetime.timedelta(milliseconds=1)
