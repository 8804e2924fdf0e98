"""Records of Kafka's internal topics: __consumer_offsets, __transaction_state and __cluster_metadata.

Sans-I/O: every function takes the key/value bytes of one record and returns plain values, or builds
those bytes. The schemas live in `formats.internal.schemas` as tables transcribed from Kafka's JSON
message definitions; one table-driven codec (`formats.internal.codec`) reads and writes Kafka's "generated message"
encoding (non-flexible: int16 strings, int32 bytes and arrays; flexible: compact lengths and tagged
fields). Decoding follows Kafka's generated readers, which do not reject versions outside the schema:
a newer version is read with the newest layout known here, as a Kafka broker of 3.9 would.

The `dump_*` functions produce the key and payload text of `kafka-dump-log.sh` with
`--offsets-decoder` (3.8+ JSON form), `--transaction-log-decoder` and `--cluster-metadata-decoder`.
Their JSON is what Kafka's generated JsonConverters print through Jackson: compact, camelCase field
names, uuids in Kafka's URL-safe base64, bytes in standard base64, tagged fields only when not default.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from formats.errors import CorruptRecordError, FormatError
from formats.internal.codec import (
    INT16,
    Malformed,
    Reader,
    dumps,
    effective_version,
    encode_prefixed,
    json_tree,
    read_message,
    read_struct,
    read_version,
    sentence,
    signed32,
    write_struct,
    write_uvarint32,
)
from formats.internal.schemas import (
    COORDINATOR_RECORDS,
    METADATA_RECORDS,
    TRANSACTION_LOG_KEY,
    TRANSACTION_LOG_VALUE,
    Schema,
)

__all__ = [
    "OffsetCommitKey",
    "GroupMetadataKey",
    "ConsumerGroupRecordKey",
    "UnknownOffsetsKey",
    "OffsetsKey",
    "OffsetCommitValue",
    "MemberMetadata",
    "GroupMetadataValue",
    "ConsumerGroupRecordValue",
    "OffsetsValue",
    "decode_offsets_key",
    "decode_offsets_value",
    "encode_offset_commit_key",
    "encode_offset_commit",
    "encode_group_metadata_key",
    "encode_group_metadata",
    "encode_consumer_group_record",
    "offsets_partition_for",
    "consumer_protocol_topics",
    "TRANSACTION_STATES",
    "TxnPartitions",
    "TxnLogValue",
    "decode_txn_key",
    "decode_txn_value",
    "encode_txn_key",
    "encode_txn_log",
    "txn_partition_for",
    "MetadataRecord",
    "decode_metadata_record",
    "encode_metadata_record",
    "metadata_schema",
    "dump_offsets_record",
    "dump_txn_record",
    "dump_metadata_record",
    "java_string_hash",
]

# ==========================================================================================================
# __consumer_offsets
# ==========================================================================================================


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitKey:
    """Key of a committed offset; record type 1 is what Kafka writes, 0 is the same layout."""

    group: str
    topic: str
    partition: int
    record_type: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataKey:
    """Key of a classic group's metadata (record type 2)."""

    group: str
    record_type: int = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupRecordKey:
    """Key of a KIP-848 consumer-group record (types 3-8 and 16), decoded generically with camelCase names."""

    record_type: int
    name: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownOffsetsKey:
    """A key whose record type this reader does not know (e.g. 4.0 share-group records); Kafka skips them."""

    record_type: int


OffsetsKey = OffsetCommitKey | GroupMetadataKey | ConsumerGroupRecordKey | UnknownOffsetsKey


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    """A committed offset; leader_epoch and expire_timestamp are -1 where the version lacks them."""

    version: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadata:
    """One member of a classic group; subscription and assignment are the protocol's opaque bytes."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    """A classic group's state as the coordinator last wrote it."""

    version: int
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupRecordValue:
    """Value of a KIP-848 consumer-group record, decoded generically with camelCase names."""

    record_type: int
    name: str
    version: int
    data: dict[str, Any]


OffsetsValue = OffsetCommitValue | GroupMetadataValue | ConsumerGroupRecordValue


def decode_offsets_key(key: bytes | bytearray | memoryview) -> OffsetsKey:
    """Decode a __consumer_offsets key; its int16 version is the record type."""
    try:
        reader = Reader(key)
        record_type = read_version(reader, "key")
        schemas = COORDINATOR_RECORDS.get(record_type)
        if schemas is None:
            return UnknownOffsetsKey(record_type=record_type)
        data = read_message(schemas[0], record_type, reader, "key")
    except Malformed as e:
        raise CorruptRecordError(sentence(e.message)) from None
    if record_type <= 1:
        return OffsetCommitKey(
            group=data["group"], topic=data["topic"], partition=data["partition"], record_type=record_type
        )
    if record_type == 2:
        return GroupMetadataKey(group=data["group"])
    return ConsumerGroupRecordKey(record_type=record_type, name=schemas[0].name, data=data)


def decode_offsets_value(
    key: OffsetsKey, value: bytes | bytearray | memoryview | None
) -> OffsetsValue | None:
    """Decode the value that goes with `key`; None for a tombstone."""
    if value is None:
        return None
    if isinstance(key, UnknownOffsetsKey):
        raise CorruptRecordError(
            f"Unknown record type {key.record_type} in __consumer_offsets, so its value cannot be read."
        )
    schema = COORDINATOR_RECORDS[key.record_type][1]
    try:
        reader = Reader(value)
        version = read_version(reader, "value")
        data = read_message(schema, version, reader, "value")
    except Malformed as e:
        raise CorruptRecordError(sentence(e.message)) from None
    if isinstance(key, OffsetCommitKey):
        return OffsetCommitValue(
            version=version,
            offset=data["offset"],
            leader_epoch=data.get("leaderEpoch", -1),
            metadata=data["metadata"],
            commit_timestamp=data["commitTimestamp"],
            expire_timestamp=data.get("expireTimestamp", -1),
        )
    if isinstance(key, GroupMetadataKey):
        return GroupMetadataValue(
            version=version,
            protocol_type=data["protocolType"],
            generation=data["generation"],
            protocol=data["protocol"],
            leader=data["leader"],
            current_state_timestamp=data.get("currentStateTimestamp", -1),
            members=tuple(
                MemberMetadata(
                    member_id=m["memberId"],
                    group_instance_id=m.get("groupInstanceId"),
                    client_id=m["clientId"],
                    client_host=m["clientHost"],
                    rebalance_timeout=m.get("rebalanceTimeout", -1),
                    session_timeout=m["sessionTimeout"],
                    subscription=m["subscription"],
                    assignment=m["assignment"],
                )
                for m in data["members"]
            ),
        )
    return ConsumerGroupRecordValue(record_type=key.record_type, name=schema.name, version=version, data=data)


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """The OffsetCommitKey (record type 1) alone: what a tombstone for an expired offset carries."""
    schema = COORDINATOR_RECORDS[1][0]
    return encode_prefixed(schema, 1, {"group": group, "topic": topic, "partition": partition})


def encode_offset_commit(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    leader_epoch: int | None,
    metadata: str,
    commit_timestamp: int,
    expire_timestamp: int | None = None,
) -> tuple[bytes, bytes]:
    """Key v1 and value v3, or value v1 when the commit carried an explicit expire time (as Kafka does)."""
    schema = COORDINATOR_RECORDS[1][1]
    fields: dict[str, Any] = {"offset": offset, "metadata": metadata, "commitTimestamp": commit_timestamp}
    if expire_timestamp is None:
        version = 3
        fields["leaderEpoch"] = -1 if leader_epoch is None else leader_epoch
    else:
        version = 1  # v1 has no leader epoch; Kafka drops it there too.
        fields["expireTimestamp"] = expire_timestamp
    return encode_offset_commit_key(group, topic, partition), encode_prefixed(schema, version, fields)


def encode_group_metadata_key(group: str) -> bytes:
    """The GroupMetadataKey (record type 2) alone: what a tombstone for a deleted group carries."""
    return encode_prefixed(COORDINATOR_RECORDS[2][0], 2, {"group": group})


def encode_group_metadata(
    group: str,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    current_state_timestamp: int,
    members: Iterable[MemberMetadata],
    *,
    version: int = 3,
) -> tuple[bytes, bytes]:
    """GroupMetadataKey and GroupMetadataValue (v3 by default, what Kafka 2.3+ writes)."""
    value = {
        "protocolType": protocol_type,
        "generation": generation,
        "protocol": protocol,
        "leader": leader,
        "currentStateTimestamp": current_state_timestamp,
        "members": [
            {
                "memberId": m.member_id,
                "groupInstanceId": m.group_instance_id,
                "clientId": m.client_id,
                "clientHost": m.client_host,
                "rebalanceTimeout": m.rebalance_timeout,
                "sessionTimeout": m.session_timeout,
                "subscription": m.subscription,
                "assignment": m.assignment,
            }
            for m in members
        ],
    }
    return encode_group_metadata_key(group), encode_prefixed(COORDINATOR_RECORDS[2][1], version, value)


def encode_consumer_group_record(
    record_type: int, key: Mapping[str, Any], value: Mapping[str, Any] | None
) -> tuple[bytes, bytes | None]:
    """A KIP-848 consumer-group record (types 3-8 and 16): its key (version = record type) and value v0, or
    None for a tombstone. Field names are the schemas' camelCase ones."""
    key_schema, value_schema = COORDINATOR_RECORDS[record_type]
    encoded_value = None if value is None else encode_prefixed(value_schema, 0, value)
    return encode_prefixed(key_schema, record_type, key), encoded_value


def offsets_partition_for(group_id: str, num_partitions: int = 50) -> int:
    """The __consumer_offsets partition of a group: abs(groupId.hashCode()) % n, with abs(MIN_VALUE) = 0."""
    return _partition_for(group_id, num_partitions)


def consumer_protocol_topics(blob: bytes, *, subscription: bool) -> dict[str, tuple[int, ...]] | None:
    """The topics of a "consumer" protocol subscription (partitions empty) or assignment, or None if unreadable.

    Group coordinators keep these blobs opaque; operators' tools (and OffsetDelete's
    GROUP_SUBSCRIBED_TO_TOPIC check) read them as the Java client's ConsumerProtocol writes them.
    """
    message = _consumer_protocol_message(blob, subscription=subscription)
    if message is None:
        return None
    if subscription:
        return {topic: () for topic in message.topics}
    return {tp.topic: tuple(tp.partitions) for tp in message.assigned_partitions}


@dataclass(frozen=True, slots=True)
class ConsumerProtocolSubscription:
    """The parts of a "consumer" JoinGroup subscription a consumer group keeps (KIP-848's classic members)."""

    version: int
    topics: tuple[str, ...]
    owned_partitions: dict[str, tuple[int, ...]]
    rack_id: str | None


def consumer_protocol_subscription(blob: bytes) -> ConsumerProtocolSubscription | None:
    """ConsumerProtocol.deserializeConsumerProtocolSubscription, or None if the bytes do not parse."""
    message = _consumer_protocol_message(blob, subscription=True)
    if message is None:
        return None
    version = INT16.unpack_from(blob)[0]
    owned = getattr(message, "owned_partitions", ())
    return ConsumerProtocolSubscription(
        version=version,
        topics=tuple(message.topics),
        owned_partitions={tp.topic: tuple(tp.partitions) for tp in owned},
        rack_id=getattr(message, "rack_id", None),
    )


def consumer_protocol_version(blob: bytes) -> int:
    """ConsumerProtocol.deserializeVersion: the leading int16 of a subscription (0 if too short)."""
    return INT16.unpack_from(blob)[0] if len(blob) >= 2 else 0


def encode_consumer_protocol_assignment(assignment: Mapping[str, Iterable[int]], version: int) -> bytes:
    """ConsumerProtocol.serializeAssignment: v0-v3 share one layout (partitions by topic name, then
    null user data); the version is the member's subscription's, capped at 3 as Kafka's is."""
    version = min(max(version, 0), 3)
    parts = [INT16.pack(version), struct.pack(">i", len(assignment))]
    for topic, partitions in assignment.items():
        name = topic.encode()
        ids = sorted(partitions)
        parts.append(struct.pack(">h", len(name)) + name + struct.pack(f">i{len(ids)}i", len(ids), *ids))
    parts.append(struct.pack(">i", -1))
    return b"".join(parts)


# ==========================================================================================================
# __transaction_state
# ==========================================================================================================

TRANSACTION_STATES: dict[int, str] = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnPartitions:
    """The partitions of one topic that take part in a transaction."""

    topic: str
    partition_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnLogValue:
    """TransactionLogValue; version 1 (flexible) adds the tagged producer ids and client version."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: tuple[TxnPartitions, ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
    version: int = 0

    @property
    def state(self) -> str:
        """Kafka's name for transaction_status, e.g. "Ongoing"."""
        try:
            return _txn_state(self.transaction_status)
        except Malformed as e:
            raise FormatError(sentence(e.message)) from None


def decode_txn_key(key: bytes | bytearray | memoryview) -> str:
    """The transactional id of a __transaction_state key (key version 0, the only one Kafka has)."""
    try:
        reader = Reader(key)
        version = read_version(reader, "key")
        if version != 0:
            raise Malformed(f"Unknown version {version} of the transaction log key")
        return read_message(TRANSACTION_LOG_KEY, 0, reader, "key")["transactionalId"]
    except Malformed as e:
        raise CorruptRecordError(sentence(e.message)) from None


def decode_txn_value(value: bytes | bytearray | memoryview | None) -> TxnLogValue | None:
    """Decode a TransactionLogValue (v0 or v1); None for a tombstone."""
    if value is None:
        return None
    try:
        data, version = _read_txn_value(value)
        _txn_state(data["transactionStatus"])  # TransactionState.fromId rejects unknown ids
    except Malformed as e:
        raise CorruptRecordError(sentence(e.message)) from None
    partitions = data["transactionPartitions"]
    return TxnLogValue(
        version=version,
        producer_id=data["producerId"],
        previous_producer_id=data["previousProducerId"] if version >= 1 else -1,
        next_producer_id=data["nextProducerId"] if version >= 1 else -1,
        producer_epoch=data["producerEpoch"],
        transaction_timeout_ms=data["transactionTimeoutMs"],
        transaction_status=data["transactionStatus"],
        transaction_partitions=None
        if partitions is None
        else tuple(TxnPartitions(topic=p["topic"], partition_ids=p["partitionIds"]) for p in partitions),
        transaction_last_update_timestamp_ms=data["transactionLastUpdateTimestampMs"],
        transaction_start_timestamp_ms=data["transactionStartTimestampMs"],
        client_transaction_version=data["clientTransactionVersion"] if version >= 1 else 0,
    )


def encode_txn_key(transactional_id: str) -> bytes:
    """The TransactionLogKey alone: what a tombstone for an expired transactional id carries."""
    return encode_prefixed(TRANSACTION_LOG_KEY, 0, {"transactionalId": transactional_id})


def encode_txn_log(transactional_id: str, value: TxnLogValue) -> tuple[bytes, bytes]:
    """Key and value of one __transaction_state record; value.version picks v0 or the flexible v1."""
    if value.transaction_status not in TRANSACTION_STATES:
        raise FormatError(f"Unknown transaction state id {value.transaction_status}.")
    data: dict[str, Any] = {
        "producerId": value.producer_id,
        "producerEpoch": value.producer_epoch,
        "transactionTimeoutMs": value.transaction_timeout_ms,
        "transactionStatus": value.transaction_status,
        "transactionPartitions": None
        if value.transaction_partitions is None
        else [{"topic": p.topic, "partitionIds": p.partition_ids} for p in value.transaction_partitions],
        "transactionLastUpdateTimestampMs": value.transaction_last_update_timestamp_ms,
        "transactionStartTimestampMs": value.transaction_start_timestamp_ms,
        "previousProducerId": value.previous_producer_id,
        "nextProducerId": value.next_producer_id,
        "clientTransactionVersion": value.client_transaction_version,
    }
    return encode_txn_key(transactional_id), encode_prefixed(TRANSACTION_LOG_VALUE, value.version, data)


def txn_partition_for(transactional_id: str, num_partitions: int = 50) -> int:
    """The __transaction_state partition of a transactional id (same hashing as groups)."""
    return _partition_for(transactional_id, num_partitions)


# ==========================================================================================================
# __cluster_metadata
# ==========================================================================================================

_FRAME_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRecord:
    """One KRaft metadata record: its apiKey, schema name, version and fields (camelCase names)."""

    api_key: int
    name: str
    version: int
    data: dict[str, Any]

    @property
    def type_name(self) -> str:
        """MetadataRecordType's enum name, e.g. TOPIC_RECORD, as kafka-dump-log prints it."""
        return _upper_snake(self.name)


def metadata_schema(record_type: str | int) -> Schema:
    """The schema of a metadata record given its apiKey, name ("TopicRecord") or enum name ("TOPIC_RECORD")."""
    if isinstance(record_type, int):
        schema = METADATA_RECORDS.get(record_type)
    else:
        schema = _METADATA_BY_NAME.get(record_type)
    if schema is None:
        raise FormatError(f"Unknown metadata record type {record_type!r}.")
    return schema


def decode_metadata_record(value: bytes | bytearray | memoryview) -> MetadataRecord:
    """Decode the value of a __cluster_metadata record: uvarint frame version (1), apiKey, version, body."""
    try:
        return _read_metadata_record(value)
    except Malformed as e:
        raise CorruptRecordError(sentence(e.message)) from None


def encode_metadata_record(record_type: str | int, version: int, data: Mapping[str, Any]) -> bytes:
    """Frame and encode one metadata record; fields left out of `data` take Kafka's defaults."""
    schema = metadata_schema(record_type)
    if version not in schema.valid:
        raise FormatError(f"{schema.name} has no version {version}; its versions are {schema.valid}.")
    out = bytearray()
    write_uvarint32(out, _FRAME_VERSION)
    write_uvarint32(out, int(schema.api_key))  # type: ignore[arg-type]
    write_uvarint32(out, version)
    write_struct(schema.fields, version, True, data, out, schema.name)
    return bytes(out)


# ==========================================================================================================
# kafka-dump-log decoder text
# ==========================================================================================================


def dump_offsets_record(
    key: bytes | bytearray | memoryview | None, value: bytes | bytearray | memoryview | None, offset: int
) -> tuple[str | None, str | None]:
    """(key text, payload text) as `kafka-dump-log --offsets-decoder` prints them (3.8+)."""
    if key is None:
        raise CorruptRecordError(
            f"Failed to decode message at offset {offset} using offset topic decoder (message had a missing key)"
        )
    try:
        reader = Reader(key)
        record_type = read_version(reader, "key")
        schemas = COORDINATOR_RECORDS.get(record_type)
        if schemas is None:
            return f"Unknown record type {record_type} at offset {offset}, skipping.", None
        key_schema, value_schema = schemas
        key_data = read_message(key_schema, record_type, reader, "key")
        key_text = dumps({"type": str(record_type), "data": json_tree(key_schema, record_type, key_data)})
        if value is None:
            return key_text, "<DELETE>"
        reader = Reader(value)
        version = read_version(reader, "value")
        value_data = read_message(value_schema, version, reader, "value")
    except Malformed as e:
        return f"Error at offset {offset}, skipping. {e.message}", None
    tree = json_tree(value_schema, version, value_data)
    if record_type == 2:
        _expand_consumer_protocol(tree, value_data)
    return key_text, dumps({"version": str(version), "data": tree})


def dump_txn_record(
    key: bytes | bytearray | memoryview | None, value: bytes | bytearray | memoryview | None, offset: int
) -> tuple[str | None, str | None]:
    """(key text, payload text) as Kafka 4.1's `kafka-dump-log --transaction-log-decoder` prints them:
    JSON like the offsets decoder's, `{"type":"0","data":{...}}` and `{"version":"N","data":{...}}`
    (older releases printed `transaction_metadata::transactionalId=...` text instead).

    Where Kafka's tool would die on a record it cannot read, this returns an
    "Error at offset ..., skipping." key text instead, like the offsets decoder.
    """
    if key is None:
        raise CorruptRecordError(
            f"Failed to decode message at offset {offset} using transaction log decoder (message had a missing key)"
        )
    try:
        reader = Reader(key)
        key_version = read_version(reader, "key")
        if key_version != 0:
            return f"Unknown record type {key_version} at offset {offset}, skipping.", None
        key_data = read_message(TRANSACTION_LOG_KEY, 0, reader, "key")
        key_text = dumps({"type": "0", "data": json_tree(TRANSACTION_LOG_KEY, 0, key_data)})
        if value is None:
            return key_text, "<DELETE>"
        reader = Reader(value)
        version = read_version(reader, "value")
        if version not in TRANSACTION_LOG_VALUE.valid:
            return (
                f"Error at offset {offset}, skipping. Found an unknown record version {version} for 0 type",
                None,
            )
        data = read_message(TRANSACTION_LOG_VALUE, version, reader, "value")
    except Malformed as e:
        return f"Error at offset {offset}, skipping. {e.message}", None
    return key_text, dumps({"version": str(version), "data": json_tree(TRANSACTION_LOG_VALUE, version, data)})


def dump_metadata_record(value: bytes | bytearray | memoryview | None, offset: int) -> str:
    """Payload text of `kafka-dump-log --cluster-metadata-decoder`: {"type":...,"version":N,"data":{...}}."""
    if value is None:
        return f"Error at {offset}, skipping. The record has no value."
    try:
        record = _read_metadata_record(value)
    except Malformed as e:
        return f"Error at {offset}, skipping. {e.kafka_message}"
    schema = METADATA_RECORDS[record.api_key]
    tree = json_tree(schema, record.version, record.data)
    return dumps({"type": record.type_name, "version": record.version, "data": tree})


# ==========================================================================================================
# Partitioning: Java's String.hashCode
# ==========================================================================================================


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: 31-multiplier over UTF-16 code units, wrapped to a signed int32."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return signed32(h)


def _partition_for(key: str, num_partitions: int) -> int:
    if num_partitions < 1:
        raise ValueError(f"The number of partitions must be at least 1, not {num_partitions}.")
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % num_partitions  # Kafka's Utils.abs


# --- __transaction_state and __cluster_metadata framing -----------------------------------------------------


def _read_txn_value(value: bytes | bytearray | memoryview) -> tuple[dict[str, Any], int]:
    """TransactionLog.readTxnRecordValue: only versions 0 and 1 are accepted."""
    reader = Reader(value)
    version = read_version(reader, "value")
    if version not in TRANSACTION_LOG_VALUE.valid:
        raise Malformed(f"Unknown version {version} from the transaction log message value")
    return read_message(TRANSACTION_LOG_VALUE, version, reader, "value"), version


def _txn_state(status: int) -> str:
    state = TRANSACTION_STATES.get(status)
    if state is None:
        raise Malformed(f"Unknown transaction state id {status} from the transaction status message")
    return state


def _read_metadata_record(value: bytes | bytearray | memoryview) -> MetadataRecord:
    """AbstractApiMessageSerde.read, with its messages; `message` adds the cause Kafka keeps apart."""
    reader = Reader(value)
    frame_version = _read_frame_short(reader, "frame version")
    if frame_version == 0:
        raise Malformed(
            "Could not deserialize metadata record with frame version 0. Note that upgrades from the "
            "preview release of KRaft in 2.8 to newer versions are not supported."
        )
    if frame_version != _FRAME_VERSION:
        raise Malformed(
            f"Could not deserialize metadata record due to unknown frame version {frame_version}"
            f"(only frame version {_FRAME_VERSION} is supported)"
        )
    api_key = _read_frame_short(reader, "type")
    version = _read_frame_short(reader, "version")
    schema = METADATA_RECORDS.get(api_key)
    if schema is None:
        unknown = f"Unknown metadata id {api_key}"
        raise Malformed(
            f"{unknown}.", f"org.apache.kafka.common.errors.UnsupportedVersionException: {unknown}"
        )
    effective = effective_version(schema, version)
    try:
        data = read_struct(schema.fields, effective, True, reader)
    except Malformed as e:
        kafka = f"Failed to deserialize record with type {api_key}"
        raise Malformed(f"{kafka} ({schema.name} version {version}): {e.message}.", kafka) from None
    if reader.remaining() > 0:
        raise Malformed(f"Found {reader.remaining()} byte(s) of garbage after {api_key}")
    return MetadataRecord(api_key=api_key, name=schema.name, version=version, data=data)


def _read_frame_short(reader: Reader, entity: str) -> int:
    try:
        value = reader.uvarint()
    except Malformed as e:
        raise Malformed(
            f"Error while reading {entity}: {e.message}", f"Error while reading {entity}"
        ) from None
    if value > 0x7FFF:
        raise Malformed(f"Value for {entity} was too large.")
    return value


def _upper_snake(name: str) -> str:
    """MessageGenerator.toSnakeCase(name).toUpperCase(): RegisterBrokerRecord -> REGISTER_BROKER_RECORD."""
    out = []
    previous_upper = True
    for ch in name:
        if ch.isupper():
            if not previous_upper:
                out.append("_")
            previous_upper = True
        else:
            previous_upper = False
        out.append(ch.upper())
    return "".join(out)


_METADATA_BY_NAME: dict[str, Schema] = {
    **{schema.name: schema for schema in METADATA_RECORDS.values()},
    **{_upper_snake(schema.name): schema for schema in METADATA_RECORDS.values()},
}


def _expand_consumer_protocol(tree: dict[str, Any], data: Mapping[str, Any]) -> None:
    """For protocolType "consumer", replace each member's subscription/assignment by its JSON if it parses."""
    if tree.get("protocolType") != "consumer":
        return
    for member_node, member in zip(tree.get("members", ()), data["members"], strict=True):
        subscription = _consumer_protocol_json(member["subscription"], subscription=True)
        if subscription is not None:
            member_node["subscription"] = subscription
        assignment = _consumer_protocol_json(member["assignment"], subscription=False)
        if assignment is not None:
            member_node["assignment"] = assignment


def _consumer_protocol_json(blob: bytes, *, subscription: bool) -> dict[str, Any] | None:
    """ConsumerProtocolSubscription/Assignment JSON read with kio's types, or None if the bytes do not parse."""
    message = _consumer_protocol_message(blob, subscription=subscription)
    if message is None:
        return None
    version = INT16.unpack_from(blob)[0]
    user_data = None if message.user_data is None else base64.b64encode(message.user_data).decode("ascii")
    if not subscription:
        partitions = message.assigned_partitions
        return {"assignedPartitions": _topic_partitions_json(partitions), "userData": user_data}
    node: dict[str, Any] = {"topics": list(message.topics), "userData": user_data}
    if version >= 1:
        node["ownedPartitions"] = _topic_partitions_json(message.owned_partitions)
    if version >= 2:
        node["generationId"] = message.generation_id
    if version >= 3:
        node["rackId"] = message.rack_id
    return node


def _consumer_protocol_message(blob: bytes, *, subscription: bool) -> Any:
    if len(blob) < 2:
        return None
    version = INT16.unpack_from(blob)[0]
    readers = _consumer_protocol_readers()[0 if subscription else 1]
    try:
        message, _ = readers[min(max(version, 0), 3)](blob, 2)  # newer versions read as the newest known
    except Exception:  # noqa: BLE001 - Kafka swallows any failure here and keeps the bytes
        return None
    return message


def _topic_partitions_json(partitions: Iterable[Any]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partitions": list(tp.partitions)} for tp in partitions]


@cache
def _consumer_protocol_readers() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """kio's readers for ConsumerProtocolSubscription and ConsumerProtocolAssignment v0-v3, loaded once."""
    from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment as A0
    from kio.schema.consumer_protocol_assignment.v1.data import ConsumerProtocolAssignment as A1
    from kio.schema.consumer_protocol_assignment.v2.data import ConsumerProtocolAssignment as A2
    from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment as A3
    from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as S0
    from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as S1
    from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as S2
    from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as S3
    from kio.serial import entity_reader

    return (
        tuple(entity_reader(cls) for cls in (S0, S1, S2, S3)),
        tuple(entity_reader(cls) for cls in (A0, A1, A2, A3)),
    )
