"""The broker side of kcli.protocol.produce_codec: its ProduceResponse writer agrees with kio byte for byte."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcli.broker.apis.produce import _response
from kcli.broker.replication.manager import PartitionResponse
from kcli.protocol.codec import entity_write
from kcli.protocol.produce_codec import write_produce_response

VERSIONS = range(3, 14)

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
topic_ids = st.one_of(st.just(uuid.UUID(int=0)), st.uuids())

outcomes = st.builds(
    PartitionResponse,
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
    refused = PartitionResponse(87, record_errors=((0, "bad"),), error_message="bad")
    moved = PartitionResponse(6, current_leader=(2, 5))
    assert write_produce_response(9, [("t", [(0, refused)])]) is None
    assert write_produce_response(10, [("t", [(0, moved)])]) is None
