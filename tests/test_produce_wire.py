"""The hand-written ProduceRequest reader and ProduceResponse writer agree with kio byte for byte."""

from __future__ import annotations

import datetime
import sys
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcli.broker.apis import request_type
from kcli.broker.apis.codec import entity_write
from kcli.broker.apis.produce import Outcome, _response
from kcli.broker.apis.produce_wire import MalformedRequest, read_produce_request, write_produce_response
from kcli.broker.server import _decode_request

VERSIONS = range(3, 14)

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
records = st.one_of(st.none(), st.binary(max_size=300))
partitions = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), records), max_size=3)
topic_ids = st.one_of(st.just(uuid.UUID(int=0)), st.uuids())
requests = st.tuples(
    st.one_of(st.none(), st.text(max_size=30)),
    st.sampled_from([-1, 0, 1, 2, -32768]),
    st.integers(-(2**31), 2**31 - 1),
    st.lists(st.tuples(names, topic_ids, partitions), max_size=3),
)


def encode_request(version: int, request: tuple) -> bytes:
    transactional_id, acks, timeout_ms, topics = request
    cls = request_type(0, version)
    module = sys.modules[cls.__module__]
    topic_data = []
    for name, topic_id, parts in topics:
        data = tuple(module.PartitionProduceData(index=i, records=r) for i, r in parts)
        key = {"topic_id": topic_id} if version >= 13 else {"name": name}
        topic_data.append(module.TopicProduceData(**key, partition_data=data))
    entity = cls(
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(topic_data),
    )
    out = bytearray()
    entity_write(cls)(out, entity)
    return bytes(out)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(request=requests)
def test_reads_what_kio_reads(version: int, request: tuple) -> None:
    frame = b"HEAD" + encode_request(version, request)
    ours = read_produce_request(frame, 4, version)
    theirs = _decode_request("Produce", 0, version, frame, 4)
    assert ours.transactional_id == theirs.transactional_id
    assert ours.acks == theirs.acks
    assert ours.timeout_ms == round(theirs.timeout.total_seconds() * 1000)
    assert len(ours.topic_data) == len(theirs.topic_data)
    for mine, kio_topic in zip(ours.topic_data, theirs.topic_data, strict=True):
        if version >= 13:
            assert mine.topic_id == kio_topic.topic_id and mine.name is None
        else:
            assert mine.name == kio_topic.name and mine.topic_id is None
        got = [(p.index, None if p.records is None else bytes(p.records)) for p in mine.partition_data]
        assert got == [(p.index, p.records) for p in kio_topic.partition_data]


@pytest.mark.parametrize("version", [3, 8, 9, 12, 13])
def test_every_truncation_is_a_malformed_request(version: int) -> None:
    body = encode_request(version, ("txn", -1, 30000, [("topic", uuid.uuid4(), [(0, b"x" * 40), (1, None)])]))
    for end in range(len(body)):
        with pytest.raises(MalformedRequest):
            read_produce_request(body[:end], 0, version)


def test_records_are_views_of_the_frame_not_copies() -> None:
    frame = encode_request(9, (None, 1, 1000, [("t", None, [(0, b"r" * 100)])]))
    records = read_produce_request(frame, 0, 9).topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is frame


@pytest.mark.parametrize(
    ("version", "body", "problem"),
    [
        (9, b"\x00\x00\x01\x00\x00\x00\x00\x02\x00", "null"),  # a null (compact 0) topic name
        (3, b"\xff\xfe", "negative"),  # transactional id of length -2
        (9, b"\x00\x00\x01\x00\x00\x00\x00\x02\x02t\x02\x00\x00\x00\x00\xff\xff\xff\xff\xff\x01", "5 bytes"),
    ],
)
def test_impossible_lengths_are_named(version: int, body: bytes, problem: str) -> None:
    with pytest.raises(MalformedRequest, match=problem):
        read_produce_request(body, 0, version)


outcomes = st.builds(
    Outcome,
    error=st.sampled_from([0, 1, 2, 6, 47, 87]),
    base_offset=st.integers(-1, 2**63 - 1),
    log_append_time=st.one_of(st.just(-1), st.integers(0, 2**42)),
    log_start_offset=st.integers(-1, 2**63 - 1),
    record_errors=st.just(()),
    error_message=st.none(),
    current_leader=st.none(),
)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(results=st.lists(st.tuples(names, topic_ids, st.lists(st.tuples(st.integers(0, 2**31 - 1), outcomes), max_size=3)), max_size=3))  # fmt: skip
def test_writes_what_kio_writes(version: int, results: list) -> None:
    by_id = version >= 13
    keyed = [
        ((topic_id if topic_id.int else None) if by_id else name, parts) for name, topic_id, parts in results
    ]
    expected = bytearray()
    response = _response(version, keyed, None, by_id)
    entity_write(type(response))(expected, response)
    assert write_produce_response(version, keyed) == bytes(expected)


def test_record_errors_and_leaders_are_left_to_kio() -> None:
    refused = Outcome(87, record_errors=((0, "bad"),), error_message="bad")
    moved = Outcome(6, current_leader=(2, 5))
    assert write_produce_response(9, [("t", [(0, refused)])]) is None
    assert write_produce_response(10, [("t", [(0, moved)])]) is None
