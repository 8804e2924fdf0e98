"""The client's hand-written Produce codec agrees with kio byte for byte, at every version v3-v13.

Requests: `ProduceFramer` frames equal kio's RequestHeader + ProduceRequest encoding. Answers: what
`read_produce_answer` reads from a ProduceResponse kio encoded equals what kio decodes; shapes it leaves
to kio (several partitions, record errors) and truncated frames give None.
"""

from __future__ import annotations

import datetime
import io
import struct
import sys
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from kcli.protocol.messages import request_type, response_type
from kcli.protocol.produce_codec import (
    ProduceFramer,
    ProducePartitionAnswer,
    answer_from_response,
    read_produce_answer,
)

VERSIONS = range(3, 14)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=249)


def kio_bytes(entity: object) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def kio_request_frame(
    version: int, correlation_id: int, partition: int, records: bytes, fields: dict
) -> bytes:
    """The frame kio encodes; `fields` are ProduceFramer's keyword arguments."""
    cls = request_type(0, version)
    module = sys.modules[cls.__module__]
    data = module.PartitionProduceData(index=partition, records=records)
    named = {"topic_id": fields["topic_id"]} if version >= 13 else {"name": fields["topic"]}
    request = cls(
        transactional_id=fields["transactional_id"],
        acks=fields["acks"],
        timeout=datetime.timedelta(milliseconds=fields["timeout_ms"]),
        topic_data=(module.TopicProduceData(**named, partition_data=(data,)),),
    )
    header_cls = RequestHeaderV2 if version >= 9 else RequestHeaderV1
    header = header_cls(
        request_api_key=0,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=fields["client_id"],
    )
    body = kio_bytes(header) + kio_bytes(request)
    return struct.pack(">i", len(body)) + body


framer_fields = st.fixed_dictionaries(
    {
        "client_id": st.none() | texts,
        "transactional_id": st.none() | texts,
        "acks": st.sampled_from([-1, 0, 1]),
        "timeout_ms": st.integers(0, 2**31 - 1),
        "topic": names,
        "topic_id": st.uuids(),
    }
)
record_sets = st.binary(max_size=300) | st.sampled_from(  # around each varint length's edges
    [b"r" * n for n in (126, 127, 16382, 16383, 0x1FFFFE, 0x1FFFFF)]
)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None)
@given(correlation_id=INT32, partition=st.integers(0, 2**31 - 1), records=record_sets, fields=framer_fields)
def test_request_frames_are_kios(
    version: int, correlation_id: int, partition: int, records: bytes, fields: dict
) -> None:
    framer = ProduceFramer(version, **fields)
    expected = kio_request_frame(version, correlation_id, partition, records, fields)
    assert framer.frame(correlation_id, partition, records) == expected
    prefix = framer.prefix(correlation_id, partition, len(records))
    assert prefix + records + framer.suffix == expected


@pytest.mark.parametrize("version", [3, 12, 13])
def test_framer_refuses_what_its_version_cannot_say(version: int) -> None:
    with pytest.raises(ValueError, match="Produce v"):
        ProduceFramer(version, client_id="c", acks=-1, timeout_ms=1, topic=None, topic_id=None)
    with pytest.raises(ValueError, match="Produce v2 is not framed here"):
        ProduceFramer(2, client_id="c", acks=-1, timeout_ms=1, topic="t")


def kio_response_frame(
    version: int, correlation_id: int, topics: list[tuple[str, uuid.UUID, list[dict]]], **top
) -> bytes:
    """A ProduceResponse frame (without its size) as kio encodes it; `top` are its top-level fields."""
    cls = response_type(0, version)
    module = sys.modules[cls.__module__]
    topic_data = []
    for name, topic_id, partitions in topics:
        answers = []
        for fields in partitions:
            fields = dict(fields)
            errors = fields.pop("record_errors", ())
            if version >= 8:
                fields["record_errors"] = tuple(
                    module.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                    for i, m in errors
                )
            if version >= 10 and fields.pop("leader", None) is not None:
                fields["current_leader"] = module.LeaderIdAndEpoch(leader_id=3, leader_epoch=7)
            answers.append(module.PartitionProduceResponse(**_known(module.PartitionProduceResponse, fields)))
        named = {"topic_id": topic_id} if version >= 13 else {"name": name}
        topic_data.append(module.TopicProduceResponse(**named, partition_responses=tuple(answers)))
    if top.pop("endpoints", False) and version >= 10:
        top["node_endpoints"] = (module.NodeEndpoint(node_id=3, host="h", port=9092, rack=None),)
    response = cls(responses=tuple(topic_data), **top)
    header = ResponseHeaderV1 if version >= 9 else ResponseHeaderV0
    return kio_bytes(header(correlation_id=correlation_id)) + kio_bytes(response)


def kio_answer(version: int, frame: bytes) -> ProducePartitionAnswer:
    cls = response_type(0, version)
    header = ResponseHeaderV1 if version >= 9 else ResponseHeaderV0
    _, offset = entity_reader(header)(frame, 0)
    response, _ = entity_reader(cls)(frame, offset)
    return answer_from_response(response)


def _known(cls: type, fields: dict) -> dict:
    return {k: v for k, v in fields.items() if k in cls.__dataclass_fields__}


times = st.none() | st.datetimes(
    min_value=datetime.datetime(1970, 1, 1),
    max_value=datetime.datetime(2200, 1, 1),
    timezones=st.just(datetime.UTC),
).map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))
partition_answers = st.fixed_dictionaries(
    {
        "index": st.integers(0, 2**31 - 1),
        "error_code": st.sampled_from(list(ErrorCode)),
        "base_offset": INT64,
        "log_append_time": times,
        "log_start_offset": INT64,
        "error_message": st.none() | texts,
        "leader": st.none() | st.just(True),
    }
)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None)
@given(
    correlation_id=INT32,
    topic=names,
    topic_id=st.uuids(),
    answer=partition_answers,
    throttle_ms=st.integers(0, 2**31 - 1),
    endpoints=st.booleans(),
)
def test_answers_read_as_kio_reads_them(
    version: int,
    correlation_id: int,
    topic: str,
    topic_id: uuid.UUID,
    answer: dict,
    throttle_ms: int,
    endpoints: bool,
) -> None:
    frame = kio_response_frame(
        version,
        correlation_id,
        [(topic, topic_id, [answer])],
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        endpoints=endpoints,
    )
    ours = read_produce_answer(frame, version)
    assert ours is not None
    assert ours == kio_answer(version, frame)
    # the framer recognises the usual answer to its own requests; any other it reads as above
    framer = ProduceFramer(version, client_id="c", acks=-1, timeout_ms=1, topic=topic, topic_id=topic_id)
    assert framer.read_answer(frame) == ours
    other = ProduceFramer(
        version, client_id="c", acks=-1, timeout_ms=1, topic=topic + "x", topic_id=uuid.uuid4()
    )
    assert other.read_answer(frame) == ours
    assert ours.index == answer["index"] and ours.error_code == answer["error_code"]
    assert ours.base_offset == answer["base_offset"]


@pytest.mark.parametrize("version", VERSIONS)
def test_other_shapes_are_left_to_kio(version: int) -> None:
    one = {"index": 0, "error_code": ErrorCode.none, "base_offset": 5}
    two_partitions = kio_response_frame(version, 1, [("t", uuid.uuid4(), [one, dict(one, index=1)])])
    assert read_produce_answer(two_partitions, version) is None
    with pytest.raises(ValueError, match="one partition of one topic"):
        kio_answer(version, two_partitions)
    two_topics = kio_response_frame(version, 1, [("t", uuid.uuid4(), [one]), ("u", uuid.uuid4(), [one])])
    assert read_produce_answer(two_topics, version) is None
    no_topic = kio_response_frame(version, 1, [])
    assert read_produce_answer(no_topic, version) is None
    if version >= 8:
        refused = dict(
            one, error_code=ErrorCode.invalid_record, record_errors=[(3, "bad")], error_message="m"
        )
        frame = kio_response_frame(version, 1, [("t", uuid.uuid4(), [refused])])
        assert read_produce_answer(frame, version) is None
        assert kio_answer(version, frame).error_message == "m"


@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_a_truncated_answer_is_left_to_kio(version: int) -> None:
    answer = {"index": 2, "error_code": ErrorCode.none, "base_offset": 9, "error_message": "x" * 5}
    frame = kio_response_frame(version, 1, [("topic", uuid.uuid4(), [answer])])
    assert read_produce_answer(frame, version) is not None
    for end in range(len(frame)):
        assert read_produce_answer(frame[:end], version) is None
    usual = kio_response_frame(version, 1, [("topic", uuid.UUID(int=7), [dict(answer, error_message=None)])])
    framer = ProduceFramer(
        version, client_id="c", acks=1, timeout_ms=1, topic="topic", topic_id=uuid.UUID(int=7)
    )
    assert framer.read_answer(usual) == kio_answer(version, usual)
    for end in range(len(usual)):
        assert framer.read_answer(usual[:end]) is None
