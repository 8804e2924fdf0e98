"""Tests for formats.internal: internal-topic record schemas and kafka-dump-log decoder text.

Golden bytes are assembled by hand from Kafka's JSON schemas; expected dump strings come from
Kafka's DumpLogSegmentsTest and §5.4 of the reference; the transaction log decoder's from Apache Kafka
4.1.2's kafka-dump-log. Hash values were computed by hand (shown) and cross-checked with a JVM.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import replace
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats.errors import CorruptRecordError, FormatError
from formats.internal import (
    ConsumerGroupRecordKey,
    ConsumerGroupRecordValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    MetadataRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    TxnLogValue,
    TxnPartitions,
    UnknownOffsetsKey,
    codec,
    consumer_protocol_topics,
    decode_metadata_record,
    decode_offsets_key,
    decode_offsets_value,
    decode_txn_key,
    decode_txn_value,
    dump_metadata_record,
    dump_offsets_record,
    dump_txn_record,
    encode_group_metadata,
    encode_group_metadata_key,
    encode_metadata_record,
    encode_offset_commit,
    encode_offset_commit_key,
    encode_txn_key,
    encode_txn_log,
    java_string_hash,
    metadata_schema,
    offsets_partition_for,
    txn_partition_for,
)
from formats.internal.schemas import COORDINATOR_RECORDS, METADATA_RECORDS, Field


# --- hand assembly helpers -------------------------------------------------------------------------------
def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def s16(text: str | None) -> bytes:
    """Non-flexible string: int16 length, -1 for null."""
    if text is None:
        return i16(-1)
    raw = text.encode()
    return i16(len(raw)) + raw


def uv(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cs(text: str | None) -> bytes:
    """Compact string: uvarint length + 1, 0 for null."""
    if text is None:
        return b"\x00"
    raw = text.encode()
    return uv(len(raw) + 1) + raw


TOPIC_ID = UUID(bytes=base64.urlsafe_b64decode("Uj5wn_FqTXirEASvVZRY1w=="))  # a uuid from Kafka's tests
NO_TAGS = b"\x00"


# ==========================================================================================================
# Partitioning
# ==========================================================================================================


def test_java_string_hash_known_values():
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("g") == 103
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112  # 65*31+97 == 66*31+66
    # "é" is one UTF-16 unit (0xE9): ((104*31 + 233)*31 + 108)*31*31 + ... as Java computes it.
    assert java_string_hash("héllo") == 103094734
    # A surrogate pair counts as two units: (0xD83D*31 + 0xDE00)*31 + ord("x") = 54959989.
    assert java_string_hash("\U0001f600x") == (0xD83D * 31 + 0xDE00) * 31 + 0x78 == 54959989
    assert java_string_hash("consumer-group") == -1738392088  # wraps negative
    assert java_string_hash("polygenelubricants") == -(2**31)


def test_partition_for_uses_abs_with_min_value_mapping_to_zero():
    assert offsets_partition_for("hello") == 99162322 % 50 == 22
    assert offsets_partition_for("consumer-group") == 1738392088 % 50 == 38
    assert offsets_partition_for("polygenelubricants") == 0
    assert offsets_partition_for("polygenelubricants", 7) == 0
    assert offsets_partition_for("hello", 1) == 0
    assert txn_partition_for("hello", 10) == 2
    assert txn_partition_for("consumer-group") == 38
    with pytest.raises(ValueError):
        offsets_partition_for("g", 0)


@given(st.text(max_size=30), st.integers(1, 1000))
def test_partition_for_is_in_range(group, n):
    assert 0 <= offsets_partition_for(group, n) < n
    assert txn_partition_for(group, n) == offsets_partition_for(group, n)


# ==========================================================================================================
# __consumer_offsets: golden bytes
# ==========================================================================================================

OFFSET_KEY_G_T_0 = i16(1) + s16("g") + s16("t") + i32(0)


def test_offset_commit_key_v1_golden():
    assert OFFSET_KEY_G_T_0 == bytes.fromhex("0001 0001 67 0001 74 00000000")
    assert decode_offsets_key(OFFSET_KEY_G_T_0) == OffsetCommitKey(group="g", topic="t", partition=0)
    assert encode_offset_commit_key("g", "t", 0) == OFFSET_KEY_G_T_0
    # Type 0 has the same layout.
    key_v0 = i16(0) + s16("g") + s16("t") + i32(7)
    assert decode_offsets_key(key_v0) == OffsetCommitKey(group="g", topic="t", partition=7, record_type=0)


def test_offset_commit_value_versions_golden():
    v3 = i16(3) + i64(42) + i32(5) + s16("meta") + i64(1_700_000_000_000)
    key = decode_offsets_key(OFFSET_KEY_G_T_0)
    assert decode_offsets_value(key, v3) == OffsetCommitValue(
        version=3,
        offset=42,
        leader_epoch=5,
        metadata="meta",
        commit_timestamp=1_700_000_000_000,
        expire_timestamp=-1,
    )
    v1 = i16(1) + i64(42) + s16("") + i64(1) + i64(99)
    assert decode_offsets_value(key, v1) == OffsetCommitValue(
        version=1, offset=42, leader_epoch=-1, metadata="", commit_timestamp=1, expire_timestamp=99
    )
    v0 = i16(0) + i64(8) + s16("m") + i64(2)
    assert decode_offsets_value(key, v0) == OffsetCommitValue(
        version=0, offset=8, leader_epoch=-1, metadata="m", commit_timestamp=2, expire_timestamp=-1
    )
    v2 = i16(2) + i64(8) + s16("m") + i64(2)
    assert decode_offsets_value(key, v2).version == 2
    # v4 is flexible; an unknown tagged field (tag 5, 2 bytes) is skipped.
    v4 = i16(4) + i64(7) + i32(3) + cs("m") + i64(9) + uv(1) + uv(5) + uv(2) + b"ab"
    assert decode_offsets_value(key, v4) == OffsetCommitValue(
        version=4, offset=7, leader_epoch=3, metadata="m", commit_timestamp=9, expire_timestamp=-1
    )
    assert decode_offsets_value(key, None) is None


def test_offset_commit_value_newer_version_reads_with_newest_layout():
    """Kafka's generated readers do not check the version: v5 reads as v4."""
    key = decode_offsets_key(OFFSET_KEY_G_T_0)
    v5 = i16(5) + i64(7) + i32(3) + cs("m") + i64(9) + NO_TAGS
    assert decode_offsets_value(key, v5) == OffsetCommitValue(
        version=5, offset=7, leader_epoch=3, metadata="m", commit_timestamp=9, expire_timestamp=-1
    )
    assert dump_offsets_record(OFFSET_KEY_G_T_0, v5, 0)[1] == (
        '{"version":"5","data":{"offset":7,"leaderEpoch":3,"metadata":"m","commitTimestamp":9}}'
    )


def test_encode_offset_commit_matches_kafka_layout():
    key, value = encode_offset_commit("g", "t", 0, 42, 5, "meta", 1_700_000_000_000)
    assert key == OFFSET_KEY_G_T_0
    assert value == i16(3) + i64(42) + i32(5) + s16("meta") + i64(1_700_000_000_000)
    key, value = encode_offset_commit("g", "t", 0, 42, 5, "", 1, expire_timestamp=99)
    assert value == i16(1) + i64(42) + s16("") + i64(1) + i64(99)  # v1: the leader epoch is dropped
    _, value = encode_offset_commit("g", "t", 0, 1, None, "", 1)
    assert decode_offsets_value(decode_offsets_key(key), value).leader_epoch == -1


SUBSCRIPTION_V3 = (
    i16(3) + i32(1) + s16("foo") + i32(-1)  # topics ["foo"], userData null
    + i32(1) + s16("foo") + i32(1) + i32(0)  # ownedPartitions [foo: [0]]
    + i32(0) + s16("rack")  # generationId 0, rackId "rack"
)  # fmt: skip
ASSIGNMENT_V3 = i16(3) + i32(1) + s16("foo") + i32(1) + i32(0) + i32(-1)

MEMBER = MemberMetadata(
    member_id="member",
    group_instance_id="instance",
    client_id="client",
    client_host="host",
    rebalance_timeout=1000,
    session_timeout=100,
    subscription=SUBSCRIPTION_V3,
    assignment=ASSIGNMENT_V3,
)


def test_group_metadata_golden_v3_and_v4():
    key = i16(2) + s16("group")
    assert decode_offsets_key(key) == GroupMetadataKey(group="group")
    assert encode_group_metadata_key("group") == key
    v3 = (
        i16(3) + s16("consumer") + i32(10) + s16("range") + s16("member") + i64(-1)
        + i32(1) + s16("member") + s16("instance") + s16("client") + s16("host") + i32(1000) + i32(100)
        + i32(len(SUBSCRIPTION_V3)) + SUBSCRIPTION_V3 + i32(len(ASSIGNMENT_V3)) + ASSIGNMENT_V3
    )  # fmt: skip
    expected = GroupMetadataValue(
        version=3,
        protocol_type="consumer",
        generation=10,
        protocol="range",
        leader="member",
        current_state_timestamp=-1,
        members=(MEMBER,),
    )
    assert decode_offsets_value(GroupMetadataKey(group="group"), v3) == expected
    assert encode_group_metadata("group", "consumer", 10, "range", "member", -1, [MEMBER]) == (key, v3)
    v4 = (
        i16(4) + cs("consumer") + i32(10) + cs("range") + cs("member") + i64(-1)
        + uv(2) + cs("member") + cs("instance") + cs("client") + cs("host") + i32(1000) + i32(100)
        + uv(len(SUBSCRIPTION_V3) + 1) + SUBSCRIPTION_V3 + uv(len(ASSIGNMENT_V3) + 1) + ASSIGNMENT_V3
        + NO_TAGS + NO_TAGS
    )  # fmt: skip
    assert encode_group_metadata("group", "consumer", 10, "range", "member", -1, [MEMBER], version=4)[1] == v4
    assert decode_offsets_value(GroupMetadataKey(group="group"), v4) == replace(expected, version=4)


def test_group_metadata_v0_has_no_rebalance_timeout_nor_instance_id():
    v0 = (
        i16(0) + s16("") + i32(0) + s16(None) + s16(None)
        + i32(1) + s16("m") + s16("c") + s16("h") + i32(30) + i32(0) + i32(0)
    )  # fmt: skip
    value = decode_offsets_value(GroupMetadataKey(group="g"), v0)
    assert value == GroupMetadataValue(
        version=0,
        protocol_type="",
        generation=0,
        protocol=None,
        leader=None,
        current_state_timestamp=-1,
        members=(
            MemberMetadata(
                member_id="m",
                group_instance_id=None,
                client_id="c",
                client_host="h",
                rebalance_timeout=-1,
                session_timeout=30,
                subscription=b"",
                assignment=b"",
            ),
        ),
    )
    # Writing v0 drops the ignorable fields, as Kafka's generated writer does.
    assert encode_group_metadata("g", "", 0, None, None, -1, value.members, version=0)[1] == v0


def test_kip848_records_decode_generically():
    key = i16(5) + s16("grp") + s16("mem")
    assert decode_offsets_key(key) == ConsumerGroupRecordKey(
        record_type=5, name="ConsumerGroupMemberMetadataKey", data={"groupId": "grp", "memberId": "mem"}
    )
    classic = i32(45000) + uv(2) + cs("range") + uv(3) + b"md" + NO_TAGS + NO_TAGS
    value = (
        i16(0) + cs(None) + cs("rack-a") + cs("cli") + cs("host") + uv(3) + cs("a") + cs("b") + cs(None)
        + i32(-1) + cs("uniform") + uv(1) + uv(0) + uv(len(classic) + 1) + b"\x01" + classic
    )  # fmt: skip
    decoded = decode_offsets_value(decode_offsets_key(key), value)
    assert decoded == ConsumerGroupRecordValue(
        record_type=5,
        name="ConsumerGroupMemberMetadataValue",
        version=0,
        data={
            "instanceId": None,
            "rackId": "rack-a",
            "clientId": "cli",
            "clientHost": "host",
            "subscribedTopicNames": ("a", "b"),
            "subscribedTopicRegex": None,
            "rebalanceTimeoutMs": -1,
            "serverAssignor": "uniform",
            "classicMemberMetadata": {
                "sessionTimeoutMs": 45000,
                "supportedProtocols": ({"name": "range", "metadata": b"md"},),
            },
        },
    )
    _, text = dump_offsets_record(key, value, 0)
    assert text == (
        '{"version":"0","data":{"instanceId":null,"rackId":"rack-a","clientId":"cli","clientHost":"host",'
        '"subscribedTopicNames":["a","b"],"subscribedTopicRegex":null,"rebalanceTimeoutMs":-1,'
        '"serverAssignor":"uniform","classicMemberMetadata":{"sessionTimeoutMs":45000,'
        '"supportedProtocols":[{"name":"range","metadata":"bWQ="}]}}}'
    )
    # Type 8: current member assignment with uuid topic ids.
    key8 = i16(8) + s16("grp") + s16("mem")
    tp = TOPIC_ID.bytes + uv(3) + i32(0) + i32(1) + NO_TAGS
    value8 = i16(0) + i32(7) + i32(6) + i8(0) + uv(2) + tp + uv(1) + NO_TAGS
    assert dump_offsets_record(key8, value8, 3) == (
        '{"type":"8","data":{"groupId":"grp","memberId":"mem"}}',
        '{"version":"0","data":{"memberEpoch":7,"previousMemberEpoch":6,"state":0,'
        '"assignedPartitions":[{"topicId":"Uj5wn_FqTXirEASvVZRY1w","partitions":[0,1]}],'
        '"partitionsPendingRevocation":[]}}',
    )


def test_unknown_record_type_key():
    key = i16(9) + s16("share")
    assert decode_offsets_key(key) == UnknownOffsetsKey(record_type=9)
    with pytest.raises(CorruptRecordError):
        decode_offsets_value(UnknownOffsetsKey(record_type=9), b"\x00\x00")
    assert decode_offsets_value(UnknownOffsetsKey(record_type=9), None) is None


# ==========================================================================================================
# __consumer_offsets: kafka-dump-log --offsets-decoder (DumpLogSegmentsTest.testOffsetsMessageParser)
# ==========================================================================================================

CG_METADATA_KEY = i16(3) + s16("group")


def test_dump_offsets_consumer_group_metadata():
    value = i16(0) + i32(10) + NO_TAGS
    assert dump_offsets_record(CG_METADATA_KEY, value, 0) == (
        '{"type":"3","data":{"groupId":"group"}}',
        '{"version":"0","data":{"epoch":10}}',
    )
    assert dump_offsets_record(CG_METADATA_KEY, None, 0) == (
        '{"type":"3","data":{"groupId":"group"}}',
        "<DELETE>",
    )


def test_dump_offsets_expands_consumer_protocol():
    key, value = encode_group_metadata("group", "consumer", 10, "range", "member", -1, [MEMBER], version=4)
    assert dump_offsets_record(key, value, 0) == (
        '{"type":"2","data":{"group":"group"}}',
        '{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
        '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
        '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
        '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{"topics":["foo"],'
        '"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":'
        '[{"topic":"foo","partitions":[0]}],"userData":null}}]}}',
    )


def test_dump_offsets_keeps_malformed_consumer_protocol_as_base64():
    member = MemberMetadata(
        **{**_member_fields(MEMBER), "subscription": b"Subscription", "assignment": b"Assignment"}
    )
    key, value = encode_group_metadata("group", "consumer", 10, "range", "member", -1, [member], version=4)
    assert dump_offsets_record(key, value, 0)[1] == (
        '{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
        '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
        '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
        '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":"U3Vic2NyaXB0aW9u",'
        '"assignment":"QXNzaWdubWVudA=="}]}}'
    )


def test_dump_offsets_older_consumer_protocol_versions_and_other_protocol_types():
    sub_v0 = i16(0) + i32(2) + s16("a") + s16("b") + i32(2) + b"ud"
    asg_v1 = i16(1) + i32(0) + i32(-1)
    member = MemberMetadata(**{**_member_fields(MEMBER), "subscription": sub_v0, "assignment": asg_v1})
    key, value = encode_group_metadata("g", "consumer", 1, None, None, 5, [member])
    text = dump_offsets_record(key, value, 0)[1]
    assert '"subscription":{"topics":["a","b"],"userData":"dWQ="}' in text
    assert '"assignment":{"assignedPartitions":[],"userData":null}' in text
    assert '"protocol":null,"leader":null,"currentStateTimestamp":5' in text
    # Only "consumer" groups are expanded (e.g. Connect's groups are not).
    key, value = encode_group_metadata("g", "connect", 1, "default", None, 5, [member])
    assert f'"subscription":"{base64.b64encode(sub_v0).decode()}"' in dump_offsets_record(key, value, 0)[1]


def test_dump_offsets_unknown_type_errors_and_missing_key():
    assert dump_offsets_record(i16(32767) + s16("group"), i16(0) + i32(10) + NO_TAGS, 0) == (
        "Unknown record type 32767 at offset 0, skipping.",
        None,
    )
    # A ConsumerGroupMemberMetadataValue (all defaults) under a ConsumerGroupMetadataKey.
    member_value = i16(0) + b"\x01\x01\x01\x01\x01\x01" + i32(-1) + b"\x01" + NO_TAGS
    assert dump_offsets_record(CG_METADATA_KEY, member_value, 0) == (
        "Error at offset 0, skipping. Could not read record with version 0 from value's buffer due to: "
        "Error reading byte array of 536870911 byte(s): only 1 byte(s) available.",
        None,
    )
    assert dump_offsets_record(b"\x00", None, 12) == (
        "Error at offset 12, skipping. Could not read version from key's buffer.",
        None,
    )
    with pytest.raises(
        CorruptRecordError,
        match=r"^Failed to decode message at offset 4 using offset topic decoder \(message had a missing key\)$",
    ):
        dump_offsets_record(None, None, 4)


def test_dump_offsets_offset_commit_versions():
    key, value = encode_offset_commit("g", "t", 0, 42, 5, "meta", 1_700_000_000_000)
    assert dump_offsets_record(key, value, 0) == (
        '{"type":"1","data":{"group":"g","topic":"t","partition":0}}',
        '{"version":"3","data":{"offset":42,"leaderEpoch":5,"metadata":"meta","commitTimestamp":1700000000000}}',
    )
    _, value = encode_offset_commit("g", "t", 0, 42, 5, "", 1, expire_timestamp=99)
    assert dump_offsets_record(key, value, 0)[1] == (
        '{"version":"1","data":{"offset":42,"metadata":"","commitTimestamp":1,"expireTimestamp":99}}'
    )


def _member_fields(member: MemberMetadata) -> dict:
    return {name: getattr(member, name) for name in MemberMetadata.__slots__}


# ==========================================================================================================
# __transaction_state
# ==========================================================================================================

TXN_KEY = i16(0) + s16("tx1")
TXN_VALUE_V0 = (
    i16(0) + i64(1000) + i16(0) + i32(60000) + i8(1)
    + i32(1) + s16("t") + i32(2) + i32(0) + i32(1)
    + i64(1_700_000_000_000) + i64(1_699_999_999_000)
)  # fmt: skip
TXN_V0 = TxnLogValue(
    producer_id=1000,
    producer_epoch=0,
    transaction_timeout_ms=60000,
    transaction_status=1,
    transaction_partitions=(TxnPartitions(topic="t", partition_ids=(0, 1)),),
    transaction_last_update_timestamp_ms=1_700_000_000_000,
    transaction_start_timestamp_ms=1_699_999_999_000,
)


def test_txn_golden_v0():
    assert decode_txn_key(TXN_KEY) == "tx1"
    assert encode_txn_key("tx1") == TXN_KEY
    assert decode_txn_value(TXN_VALUE_V0) == TXN_V0
    assert TXN_V0.state == "Ongoing"
    assert encode_txn_log("tx1", TXN_V0) == (TXN_KEY, TXN_VALUE_V0)
    assert decode_txn_value(None) is None


def test_txn_golden_v1_with_tagged_fields():
    value = (
        i16(1) + i64(1000) + i16(3) + i32(60000) + i8(4)
        + uv(2) + cs("t") + uv(2) + i32(0) + NO_TAGS
        + i64(5) + i64(4)
        + uv(2) + uv(0) + uv(8) + i64(999) + uv(2) + uv(2) + i16(2)  # previousProducerId, clientTransactionVersion
    )  # fmt: skip
    expected = TxnLogValue(
        version=1,
        producer_id=1000,
        previous_producer_id=999,
        producer_epoch=3,
        transaction_timeout_ms=60000,
        transaction_status=4,
        transaction_partitions=(TxnPartitions(topic="t", partition_ids=(0,)),),
        transaction_last_update_timestamp_ms=5,
        transaction_start_timestamp_ms=4,
        client_transaction_version=2,
    )
    assert decode_txn_value(value) == expected
    assert encode_txn_log("tx1", expected)[1] == value
    assert expected.state == "CompleteCommit"


def test_txn_errors():
    with pytest.raises(CorruptRecordError, match="Unknown version 2 from the transaction log message value"):
        decode_txn_value(i16(2) + TXN_VALUE_V0[2:])
    with pytest.raises(CorruptRecordError):
        decode_txn_key(i16(1) + s16("x"))
    with pytest.raises(FormatError):
        encode_txn_log("x", TxnLogValue(**{**_txn_fields(TXN_V0), "client_transaction_version": 2}))  # v0
    with pytest.raises(FormatError):
        encode_txn_log("x", TxnLogValue(**{**_txn_fields(TXN_V0), "transaction_status": 9}))
    with pytest.raises(ValueError, match="Unknown transaction state id 9"):
        _ = TxnLogValue(**{**_txn_fields(TXN_V0), "transaction_status": 9}).state


def test_dump_txn_record():
    """Kafka 4.1's text, each case checked against its kafka-dump-log --transaction-log-decoder."""
    assert dump_txn_record(TXN_KEY, TXN_VALUE_V0, 0) == (
        '{"type":"0","data":{"transactionalId":"tx1"}}',
        '{"version":"0","data":{"producerId":1000,"producerEpoch":0,"transactionTimeoutMs":60000,'
        '"transactionStatus":1,"transactionPartitions":[{"topic":"t","partitionIds":[0,1]}],'
        '"transactionLastUpdateTimestampMs":1700000000000,"transactionStartTimestampMs":1699999999000}}',
    )
    assert dump_txn_record(TXN_KEY, None, 0) == ('{"type":"0","data":{"transactionalId":"tx1"}}', "<DELETE>")
    assert dump_txn_record(i16(1) + s16("tx1"), TXN_VALUE_V0, 2) == (
        "Unknown record type 1 at offset 2, skipping.",
        None,
    )
    assert dump_txn_record(TXN_KEY, i16(7) + TXN_VALUE_V0[2:], 5) == (
        "Error at offset 5, skipping. Found an unknown record version 7 for 0 type",
        None,
    )
    empty = TxnLogValue(**{**_txn_fields(TXN_V0), "transaction_status": 0, "transaction_partitions": None})
    assert (
        '"transactionStatus":0,"transactionPartitions":null,'
        in dump_txn_record(*encode_txn_log("tx1", empty), 0)[1]
    )
    # Kafka's message ends "due to: null." (a BufferUnderflowException has none); kcli says what was short.
    assert dump_txn_record(TXN_KEY, TXN_VALUE_V0[:-3], 9) == (
        "Error at offset 9, skipping. Could not read record with version 0 from value's buffer due to: "
        "Not enough bytes to read a 8-byte value: only 5 byte(s) available.",
        None,
    )
    with pytest.raises(CorruptRecordError, match="missing key"):
        dump_txn_record(None, TXN_VALUE_V0, 0)


def test_dump_txn_record_v1_prints_tagged_fields_only_when_set():
    """Value v1 (flexible): PreviousProducerId, NextProducerId and ClientTransactionVersion are tagged
    fields, in the JSON only when they differ from their defaults, as Kafka's JSON converter writes them."""
    plain = TxnLogValue(**{**_txn_fields(TXN_V0), "version": 1})
    text = dump_txn_record(*encode_txn_log("tx1", plain), 0)[1]
    assert text.startswith('{"version":"1","data":{"producerId":1000,') and "previousProducerId" not in text
    tagged = TxnLogValue(**{**_txn_fields(plain), "previous_producer_id": 7, "client_transaction_version": 2})
    text = dump_txn_record(*encode_txn_log("tx1", tagged), 0)[1]
    assert '"previousProducerId":7' in text and '"clientTransactionVersion":2' in text
    assert "nextProducerId" not in text


def _txn_fields(value: TxnLogValue) -> dict:
    return {name: getattr(value, name) for name in TxnLogValue.__slots__}


# ==========================================================================================================
# __cluster_metadata
# ==========================================================================================================

TOPIC_RECORD = b"\x01\x02\x00" + cs("foo") + TOPIC_ID.bytes + NO_TAGS


def test_topic_record_golden():
    record = decode_metadata_record(TOPIC_RECORD)
    assert record == MetadataRecord(
        api_key=2, name="TopicRecord", version=0, data={"name": "foo", "topicId": TOPIC_ID}
    )
    assert record.type_name == "TOPIC_RECORD"
    assert encode_metadata_record("TopicRecord", 0, {"name": "foo", "topicId": TOPIC_ID}) == TOPIC_RECORD
    assert encode_metadata_record("TOPIC_RECORD", 0, {"name": "foo", "topicId": TOPIC_ID}) == TOPIC_RECORD
    assert encode_metadata_record(2, 0, {"name": "foo", "topicId": TOPIC_ID}) == TOPIC_RECORD
    assert dump_metadata_record(TOPIC_RECORD, 0) == (
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"foo","topicId":"Uj5wn_FqTXirEASvVZRY1w"}}'
    )


def test_partition_record_golden_v0_and_tagged_fields():
    body = (
        i32(0) + TOPIC_ID.bytes + uv(3) + i32(1) + i32(2) + uv(3) + i32(1) + i32(2) + uv(1) + uv(1)
        + i32(1) + i32(0) + i32(0)
    )  # fmt: skip
    v0 = b"\x01\x03\x00" + body + NO_TAGS
    data = {
        "partitionId": 0,
        "topicId": TOPIC_ID,
        "replicas": [1, 2],
        "isr": [1, 2],
        "leader": 1,
        "leaderEpoch": 0,
    }
    data["partitionEpoch"] = 0
    assert encode_metadata_record("PartitionRecord", 0, data) == v0
    assert decode_metadata_record(v0).data["replicas"] == (1, 2)
    assert dump_metadata_record(v0, 0) == (
        '{"type":"PARTITION_RECORD","version":0,"data":{"partitionId":0,"topicId":"Uj5wn_FqTXirEASvVZRY1w",'
        '"replicas":[1,2],"isr":[1,2],"removingReplicas":[],"addingReplicas":[],"leader":1,'
        '"leaderEpoch":0,"partitionEpoch":0}}'
    )
    # LeaderRecoveryState is tag 0; it is printed in field order, only when not the default 0.
    recovering = b"\x01\x03\x00" + body + uv(1) + uv(0) + uv(1) + i8(1)
    assert encode_metadata_record("PartitionRecord", 0, {**data, "leaderRecoveryState": 1}) == recovering
    assert '"leader":1,"leaderRecoveryState":1,"leaderEpoch":0' in dump_metadata_record(recovering, 0)
    # v2: directories (v1+) and the ELR tags 1 and 2 (nullable, default null).
    dir_id = UUID(int=7)
    v2 = (
        b"\x01\x03\x02" + body + uv(2) + dir_id.bytes
        + uv(1) + uv(1) + uv(1 + 8) + uv(3) + i32(3) + i32(4)
    )  # fmt: skip
    record = decode_metadata_record(v2)
    assert record.data["directories"] == (dir_id,)
    assert record.data["eligibleLeaderReplicas"] == (3, 4)
    assert record.data["lastKnownElr"] is None
    assert encode_metadata_record(3, 2, record.data) == v2
    assert dump_metadata_record(v2, 0).endswith(
        '"partitionEpoch":0,"directories":["AAAAAAAAAAAAAAAAAAAABw"],"eligibleLeaderReplicas":[3,4]}}'
    )


def test_partition_change_record_tags_and_json_field_order():
    data = {"partitionId": 0, "topicId": UUID(int=1), "leader": 1, "isr": [1, 2]}
    encoded = encode_metadata_record("PartitionChangeRecord", 0, data)
    # Tagged fields are written in tag order: isr (0), leader (1).
    tags = uv(2) + uv(0) + uv(9) + uv(3) + i32(1) + i32(2) + uv(1) + uv(4) + i32(1)
    assert encoded == b"\x01\x05\x00" + i32(0) + UUID(int=1).bytes + tags
    assert dump_metadata_record(encoded, 0) == (
        '{"type":"PARTITION_CHANGE_RECORD","version":0,"data":{"partitionId":0,'
        '"topicId":"AAAAAAAAAAAAAAAAAAAAAQ","isr":[1,2],"leader":1}}'
    )
    # An empty (non-null) ISR is still written: its default is null.
    empty_isr = decode_metadata_record(encode_metadata_record(5, 0, {"topicId": UUID(int=1), "isr": []}))
    assert empty_isr.data["isr"] == () and empty_isr.data["leader"] == -2


def test_feature_level_noop_config_and_other_records():
    feature = b"\x01\x0c\x00" + cs("metadata.version") + i16(20) + NO_TAGS
    assert (
        encode_metadata_record("FeatureLevelRecord", 0, {"name": "metadata.version", "featureLevel": 20})
        == feature
    )
    assert dump_metadata_record(feature, 5) == (
        '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":20}}'
    )
    noop = encode_metadata_record("NoOpRecord", 0, {})
    assert noop == b"\x01\x14\x00\x00"
    assert dump_metadata_record(noop, 0) == '{"type":"NO_OP_RECORD","version":0,"data":{}}'
    config = encode_metadata_record("ConfigRecord", 0, {"resourceType": 2, "resourceName": "t", "name": "x"})
    assert config == b"\x01\x04\x00" + i8(2) + cs("t") + cs("x") + cs("") + NO_TAGS  # value defaults to ""
    config = encode_metadata_record(
        4, 0, {"resourceType": 2, "resourceName": "t", "name": "x", "value": None}
    )
    assert dump_metadata_record(config, 0) == (
        '{"type":"CONFIG_RECORD","version":0,"data":{"resourceType":2,"resourceName":"t","name":"x","value":null}}'
    )
    pids = encode_metadata_record(
        "ProducerIdsRecord", 0, {"brokerId": 1, "brokerEpoch": 5, "nextProducerId": 2000}
    )
    assert pids == b"\x01\x0f\x00" + i32(1) + i64(5) + i64(2000) + NO_TAGS
    remove = encode_metadata_record("RemoveTopicRecord", 0, {"topicId": TOPIC_ID})
    assert decode_metadata_record(remove).data == {"topicId": TOPIC_ID}
    zk = encode_metadata_record(21, 0, {"zkMigrationState": 3})
    assert dump_metadata_record(zk, 0) == (
        '{"type":"ZK_MIGRATION_STATE_RECORD","version":0,"data":{"zkMigrationState":3}}'
    )


def test_register_broker_record_json():
    data = {
        "brokerId": 1,
        "incarnationId": UUID(int=3),
        "brokerEpoch": 10,
        "endPoints": [{"name": "PLAINTEXT", "host": "localhost", "port": 9092, "securityProtocol": 0}],
        "features": [{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": 21}],
        "rack": None,
        "logDirs": [UUID(int=9)],
    }
    encoded = encode_metadata_record("RegisterBrokerRecord", 3, data)
    assert dump_metadata_record(encoded, 0) == (
        '{"type":"REGISTER_BROKER_RECORD","version":3,"data":{"brokerId":1,"isMigratingZkBroker":false,'
        '"incarnationId":"AAAAAAAAAAAAAAAAAAAAAw","brokerEpoch":10,"endPoints":[{"name":"PLAINTEXT",'
        '"host":"localhost","port":9092,"securityProtocol":0}],"features":[{"name":"metadata.version",'
        '"minSupportedVersion":1,"maxSupportedVersion":21}],"rack":null,"fenced":true,'
        '"inControlledShutdown":false,"logDirs":["AAAAAAAAAAAAAAAAAAAACQ"]}}'
    )
    # v0 has neither isMigratingZkBroker nor inControlledShutdown nor logDirs.
    v0 = encode_metadata_record(0, 0, {k: v for k, v in data.items() if k != "logDirs"})
    assert '"rack":null,"fenced":true}}' in dump_metadata_record(v0, 0)
    # A port above 32767 is an uint16.
    high = encode_metadata_record(0, 0, {"endPoints": [{"name": "A", "host": "h", "port": 65535}]})
    assert decode_metadata_record(high).data["endPoints"][0]["port"] == 65535


def test_json_strings_floats_and_bytes_as_jackson_writes_them():
    config = encode_metadata_record(
        4, 0, {"resourceName": "t", "name": "x", "value": 'a"b\\c\nd\x01\x1fé/\t'}
    )
    assert dump_metadata_record(config, 0).endswith('"value":"a\\"b\\\\c\\nd\\u0001\\u001Fé/\\t"}}')
    quota = {
        "entity": [{"entityType": "user", "entityName": None}],
        "key": "producer_byte_rate",
        "value": 1e7,
    }
    text = dump_metadata_record(encode_metadata_record("ClientQuotaRecord", 0, quota), 0)
    assert text == (
        '{"type":"CLIENT_QUOTA_RECORD","version":0,"data":{"entity":[{"entityType":"user","entityName":null}],'
        '"key":"producer_byte_rate","value":1.0E7,"remove":false}}'
    )
    for value, java in [
        (1024.0, "1024.0"),
        (0.001, "0.001"),
        (1e-4, "1.0E-4"),
        (1.5e16, "1.5E16"),
        (5e-324, "4.9E-324"),
    ]:
        encoded = encode_metadata_record(14, 0, {**quota, "value": value})
        assert f'"value":{java},' in dump_metadata_record(encoded, 0)
    scram = {
        "name": "alice",
        "mechanism": 1,
        "salt": b"\x01\x02\x03\xff",
        "storedKey": b"",
        "iterations": 4096,
    }
    text = dump_metadata_record(encode_metadata_record("UserScramCredentialRecord", 0, scram), 0)
    assert '"salt":"AQID/w==","storedKey":"","serverKey":"","iterations":4096' in text


def test_metadata_errors_with_kafka_wording():
    assert (
        dump_metadata_record(TOPIC_RECORD + b"xyz", 7)
        == "Error at 7, skipping. Found 3 byte(s) of garbage after 2"
    )
    assert dump_metadata_record(b"\x00\x02\x00", 7) == (
        "Error at 7, skipping. Could not deserialize metadata record with frame version 0. Note that upgrades "
        "from the preview release of KRaft in 2.8 to newer versions are not supported."
    )
    assert dump_metadata_record(b"\x02\x02\x00", 7) == (
        "Error at 7, skipping. Could not deserialize metadata record due to unknown frame version 2"
        "(only frame version 1 is supported)"
    )
    assert dump_metadata_record(b"\x01\x06\x00", 7) == (
        "Error at 7, skipping. org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id 6"
    )
    assert (
        dump_metadata_record(TOPIC_RECORD[:-3], 7)
        == "Error at 7, skipping. Failed to deserialize record with type 2"
    )
    assert dump_metadata_record(b"", 7) == "Error at 7, skipping. Error while reading frame version"
    assert (
        dump_metadata_record(b"\x01\xff\xff\x03", 7) == "Error at 7, skipping. Value for type was too large."
    )
    with pytest.raises(CorruptRecordError, match=r"^Failed to deserialize record with type 2 \(TopicRecord"):
        decode_metadata_record(TOPIC_RECORD[:-3])
    with pytest.raises(CorruptRecordError, match="garbage"):
        decode_metadata_record(TOPIC_RECORD + b"\x00")


def test_encode_metadata_rejects_bad_input():
    with pytest.raises(FormatError, match="no field named 'nmae'"):
        encode_metadata_record("TopicRecord", 0, {"nmae": "x"})
    with pytest.raises(FormatError, match="no version 1"):
        encode_metadata_record("TopicRecord", 1, {})
    with pytest.raises(FormatError, match="Unknown metadata record type"):
        encode_metadata_record("NopeRecord", 0, {})
    with pytest.raises(FormatError, match="Unknown metadata record type"):
        metadata_schema(6)
    with pytest.raises(FormatError, match="non-default isMigratingZkBroker at version 1"):
        encode_metadata_record("RegisterBrokerRecord", 1, {"isMigratingZkBroker": True})
    with pytest.raises(FormatError, match="out of range for int32"):
        encode_metadata_record("FenceBrokerRecord", 0, {"id": 2**31})
    with pytest.raises(FormatError, match="must be a uuid.UUID"):
        encode_metadata_record("TopicRecord", 0, {"topicId": "Uj5wn_FqTXirEASvVZRY1w"})
    with pytest.raises(FormatError, match="not nullable"):
        encode_metadata_record("TopicRecord", 0, {"name": None})
    with pytest.raises(FormatError, match="must be a sequence"):
        encode_metadata_record("PartitionRecord", 0, {"replicas": "1,2"})
    with pytest.raises(FormatError, match="must be a bool"):
        encode_metadata_record("RegisterBrokerRecord", 0, {"fenced": 1})
    with pytest.raises(FormatError, match="too long"):
        encode_offset_commit("g", "t" * 40000, 0, 0, 0, "", 0)


# ==========================================================================================================
# Round trips (hypothesis)
# ==========================================================================================================

names = st.text(max_size=12)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)


@given(names, names, int32s, int64s, int32s, names, int64s, st.none() | int64s)
def test_offset_commit_round_trip(group, topic, partition, offset, leader_epoch, metadata, commit, expire):
    key, value = encode_offset_commit(group, topic, partition, offset, leader_epoch, metadata, commit, expire)
    decoded_key = decode_offsets_key(key)
    assert decoded_key == OffsetCommitKey(group=group, topic=topic, partition=partition)
    decoded = decode_offsets_value(decoded_key, value)
    assert decoded == OffsetCommitValue(
        version=3 if expire is None else 1,
        offset=offset,
        leader_epoch=leader_epoch if expire is None else -1,
        metadata=metadata,
        commit_timestamp=commit,
        expire_timestamp=-1 if expire is None else expire,
    )


members = st.builds(
    MemberMetadata,
    member_id=names,
    group_instance_id=st.none() | names,
    client_id=names,
    client_host=names,
    rebalance_timeout=int32s,
    session_timeout=int32s,
    subscription=st.binary(max_size=20),
    assignment=st.binary(max_size=20),
)


@given(
    names,
    names,
    int32s,
    st.none() | names,
    st.none() | names,
    int64s,
    st.lists(members, max_size=3),
    st.sampled_from([3, 4]),
)
def test_group_metadata_round_trip(
    group, protocol_type, generation, protocol, leader, timestamp, group_members, version
):
    key, value = encode_group_metadata(
        group, protocol_type, generation, protocol, leader, timestamp, group_members, version=version
    )
    decoded_key = decode_offsets_key(key)
    assert decoded_key == GroupMetadataKey(group=group)
    assert decode_offsets_value(decoded_key, value) == GroupMetadataValue(
        version=version,
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp=timestamp,
        members=tuple(group_members),
    )
    key_text, value_text = dump_offsets_record(key, value, 0)
    assert key_text.startswith('{"type":"2","data":{"group":') and value_text.startswith(
        f'{{"version":"{version}"'
    )


txn_values = st.builds(
    TxnLogValue,
    producer_id=int64s,
    producer_epoch=st.integers(-(2**15), 2**15 - 1),
    transaction_timeout_ms=int32s,
    transaction_status=st.integers(0, 7),
    transaction_partitions=st.none()
    | st.lists(
        st.builds(TxnPartitions, topic=names, partition_ids=st.lists(int32s, max_size=5).map(tuple)),
        max_size=3,
    ).map(tuple),
    transaction_last_update_timestamp_ms=int64s,
    transaction_start_timestamp_ms=int64s,
    previous_producer_id=int64s,
    next_producer_id=int64s,
    client_transaction_version=st.integers(-(2**15), 2**15 - 1),
    version=st.just(1),
)


@given(names, txn_values, st.booleans())
def test_txn_log_round_trip(transactional_id, value, as_v0):
    if as_v0:  # v0 has none of the tagged fields
        fields = {**_txn_fields(value), "version": 0, "previous_producer_id": -1, "next_producer_id": -1}
        value = TxnLogValue(**{**fields, "client_transaction_version": 0})
    key, encoded = encode_txn_log(transactional_id, value)
    assert decode_txn_key(key) == transactional_id
    assert decode_txn_value(encoded) == value
    key_text, payload = dump_txn_record(key, encoded, 0)
    assert json.loads(key_text) == {"type": "0", "data": {"transactionalId": transactional_id}}
    data = json.loads(payload)["data"]
    assert (data["producerId"], data["producerEpoch"], data["transactionStatus"]) == (
        value.producer_id, value.producer_epoch, value.transaction_status
    )  # fmt: skip


def _value_strategy(field: Field, version: int) -> st.SearchStrategy:
    element = _element_strategy(field, version)
    strategy = st.lists(element, max_size=3).map(tuple) if field.is_array else element
    return st.none() | strategy if version in field.nullable else strategy


_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _element_strategy(field: Field, version: int) -> st.SearchStrategy:
    if field.type == "struct":
        return _struct_strategy(field.fields, version)
    if field.type in _INT_RANGES:
        return st.integers(*_INT_RANGES[field.type])
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "uuid": st.builds(UUID, int=st.integers(0, 2**128 - 1)),
        "string": st.text(max_size=8),
        "bytes": st.binary(max_size=8),
    }[field.type]


def _struct_strategy(fields: tuple[Field, ...], version: int) -> st.SearchStrategy:
    return st.fixed_dictionaries(
        {f.name: _value_strategy(f, version) for f in fields if version in f.versions}
    )


METADATA_CASES = [
    (schema, version)
    for schema in METADATA_RECORDS.values()
    for version in range(schema.valid.lowest, schema.valid.highest + 1)
]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_metadata_record_round_trip_every_type_and_version(data):
    schema, version = data.draw(st.sampled_from(METADATA_CASES))
    fields = data.draw(_struct_strategy(schema.fields, version))
    encoded = encode_metadata_record(schema.name, version, fields)
    record = decode_metadata_record(encoded)
    assert record == MetadataRecord(api_key=schema.api_key, name=schema.name, version=version, data=fields)
    assert encode_metadata_record(schema.api_key, version, record.data) == encoded
    text = dump_metadata_record(encoded, 0)
    assert text.startswith(f'{{"type":"{record.type_name}","version":{version},"data":{{')


COORDINATOR_CASES = [(record_type, schemas) for record_type, schemas in COORDINATOR_RECORDS.items()]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_coordinator_records_round_trip_every_type_and_version(data):
    """Every __consumer_offsets schema through the codec (the private writer stands in for Kafka's)."""
    record_type, (key_schema, value_schema) = data.draw(st.sampled_from(COORDINATOR_CASES))
    version = data.draw(st.integers(value_schema.valid.lowest, value_schema.valid.highest))
    key_fields = data.draw(_struct_strategy(key_schema.fields, record_type))
    value_fields = data.draw(_struct_strategy(value_schema.fields, version))
    key = codec.encode_prefixed(key_schema, record_type, key_fields)
    value = codec.encode_prefixed(value_schema, version, value_fields)
    decoded_key = decode_offsets_key(key)
    decoded_value = decode_offsets_value(decoded_key, value)
    if record_type >= 3:
        assert decoded_key == ConsumerGroupRecordKey(
            record_type=record_type, name=key_schema.name, data=key_fields
        )
        assert decoded_value == ConsumerGroupRecordValue(
            record_type=record_type, name=value_schema.name, version=version, data=value_fields
        )
    key_text, value_text = dump_offsets_record(key, value, 0)
    assert key_text.startswith(f'{{"type":"{record_type}","data":')
    assert value_text.startswith(f'{{"version":"{version}","data":')


# ==========================================================================================================
# Garbage and truncation: only FormatError subclasses
# ==========================================================================================================

VALID_SAMPLES = [
    ("offsets", OFFSET_KEY_G_T_0, encode_offset_commit("g", "t", 0, 42, 5, "meta", 1)[1]),
    ("offsets", *encode_group_metadata("group", "consumer", 10, "range", "member", -1, [MEMBER])),
    ("offsets", *encode_group_metadata("group", "consumer", 10, "range", "member", -1, [MEMBER], version=4)),
    ("offsets", CG_METADATA_KEY, i16(0) + i32(10) + NO_TAGS),
    ("txn", TXN_KEY, TXN_VALUE_V0),
    (
        "txn",
        *encode_txn_log("tx1", TxnLogValue(**{**_txn_fields(TXN_V0), "version": 1, "next_producer_id": 4})),
    ),
    ("metadata", None, TOPIC_RECORD),
    (
        "metadata",
        None,
        encode_metadata_record(0, 3, {"endPoints": [{"name": "A"}], "logDirs": [UUID(int=1)]}),
    ),
    (
        "metadata",
        None,
        encode_metadata_record(5, 2, {"isr": [1], "eligibleLeaderReplicas": [], "directories": []}),
    ),
]


def _decode_everything(kind: str, key: bytes | None, value: bytes) -> None:
    """Run every decoder on the bytes; any exception other than FormatError fails the test."""
    if kind == "offsets":
        try:
            decode_offsets_value(decode_offsets_key(key), value)
        except FormatError:
            pass
        dump_offsets_record(key, value, 0)
    elif kind == "txn":
        for decode in (lambda: decode_txn_key(key), lambda: decode_txn_value(value)):
            try:
                decode()
            except FormatError:
                pass
        dump_txn_record(key, value, 0)
    else:
        try:
            decode_metadata_record(value)
        except FormatError:
            pass
        assert dump_metadata_record(value, 0).startswith(("{", "Error at 0, skipping. "))


@pytest.mark.parametrize("kind,key,value", VALID_SAMPLES)
def test_every_truncation_is_a_format_error(kind, key, value):
    for cut in range(len(value)):
        with pytest.raises(FormatError):
            if kind == "offsets":
                decode_offsets_value(decode_offsets_key(key), value[:cut])
            elif kind == "txn":
                decode_txn_value(value[:cut])
            else:
                decode_metadata_record(value[:cut])
    if key is not None:
        for cut in range(len(key)):
            with pytest.raises(FormatError):
                if kind == "offsets":
                    decode_offsets_key(key[:cut])
                else:
                    decode_txn_key(key[:cut])


@settings(max_examples=400)
@given(st.sampled_from(VALID_SAMPLES), st.data())
def test_mutated_records_raise_only_format_errors(sample, data):
    kind, key, value = sample
    mutated = bytearray(value)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] = data.draw(st.integers(0, 255))
    _decode_everything(kind, key, bytes(mutated))


@settings(max_examples=300)
@given(st.sampled_from(["offsets", "txn", "metadata"]), st.binary(max_size=48), st.binary(max_size=64))
def test_garbage_raises_only_format_errors(kind, key, value):
    _decode_everything(kind, key, value)
    if kind == "offsets":
        try:
            decode_offsets_key(key)
        except FormatError:
            pass


def test_consumer_protocol_topics_reads_subscriptions_and_assignments():
    sub_v0 = i16(0) + i32(2) + s16("a") + s16("b") + i32(-1)
    asg_v0 = i16(0) + i32(2) + s16("a") + i32(2) + i32(0) + i32(3) + s16("b") + i32(0) + i32(-1)
    assert consumer_protocol_topics(sub_v0, subscription=True) == {"a": (), "b": ()}
    assert consumer_protocol_topics(asg_v0, subscription=False) == {"a": (0, 3), "b": ()}
    assert consumer_protocol_topics(b"", subscription=False) is None
    assert consumer_protocol_topics(b"\0\0garbage", subscription=True) is None
