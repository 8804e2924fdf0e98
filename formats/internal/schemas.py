"""Schemas of the records Kafka keeps in its internal topics, as small tables.

Each table is transcribed from one of Kafka's JSON message definitions
(group-coordinator/.../common/message/*.json, transaction-coordinator/.../TransactionLog*.json,
metadata/.../common/metadata/*.json, checked against trunk 1eb7644349cb and the 3.8/3.9 branches).
Field names are kept in Kafka's spelling; `Field.name` is the camelCase form Kafka's generated
JsonConverters print. `formats.internal` holds the codec that walks these tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

__all__ = [
    "ZERO_UUID",
    "Versions",
    "Field",
    "Schema",
    "COORDINATOR_RECORDS",
    "TRANSACTION_LOG_KEY",
    "TRANSACTION_LOG_VALUE",
    "METADATA_RECORDS",
]

ZERO_UUID = UUID(int=0)

PRIMITIVES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "uuid", "string", "bytes"}
)


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive range of versions, empty when lowest > highest (Kafka's "none")."""

    lowest: int
    highest: int

    def __contains__(self, version: int) -> bool:
        return self.lowest <= version <= self.highest

    def __str__(self) -> str:
        if self.lowest > self.highest:
            return "none"
        if self.lowest == self.highest:
            return str(self.lowest)
        return f"{self.lowest}-{self.highest}"

    @staticmethod
    def parse(text: str) -> Versions:
        """Kafka's version syntax: "none", "3", "3+", "0-2"."""
        if text == "none":
            return NONE
        if text.endswith("+"):
            return Versions(int(text[:-1]), 0x7FFF)
        low, _, high = text.partition("-")
        return Versions(int(low), int(high or low))

    def intersect(self, other: Versions) -> Versions:
        return Versions(max(self.lowest, other.lowest), min(self.highest, other.highest))


NONE = Versions(1, 0)
_UNSET = object()


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message: `type` is the element type when `is_array`, "struct" for nested structs."""

    name: str
    type: str
    is_array: bool
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions
    default: object
    ignorable: bool
    fields: tuple[Field, ...]

    def is_tagged(self, version: int) -> bool:
        return version in self.tagged


@dataclass(frozen=True, slots=True)
class Schema:
    """A top-level message: the versions it has and which of them use the flexible encoding."""

    name: str
    valid: Versions
    flexible: Versions
    fields: tuple[Field, ...]
    api_key: int | None = None


def f(
    name: str,
    type: str,
    versions: str | None = None,
    *,
    nullable: str = "none",
    tag: int | None = None,
    tagged: str = "none",
    default: object = _UNSET,
    ignorable: bool = False,
    fields: tuple[Field, ...] = (),
) -> Field:
    """A field as written in Kafka's JSON; versions default to the tagged versions, as in FieldSpec."""
    is_array = type.startswith("[]")
    element = type[2:] if is_array else type
    if element not in PRIMITIVES:
        if not fields:
            raise ValueError(f"struct field {name} needs its fields")
        element = "struct"
    tagged_versions = Versions.parse(tagged)
    field_versions = Versions.parse(versions) if versions is not None else tagged_versions
    nullable_versions = Versions.parse(nullable)
    if default is _UNSET:
        default = _type_default(element, is_array, fields)
    return Field(
        name=name[0].lower() + name[1:],
        type=element,
        is_array=is_array,
        versions=field_versions,
        nullable=nullable_versions,
        tag=tag,
        tagged=tagged_versions,
        default=default,
        ignorable=ignorable,
        fields=tuple(fields),
    )


def _type_default(element: str, is_array: bool, fields: tuple[Field, ...]) -> object:
    """Kafka's implicit defaults: zero, false, "", empty bytes, empty array, zero uuid, default struct."""
    if is_array:
        return ()
    if element == "struct":
        return {fld.name: fld.default for fld in fields}
    return {
        "bool": False,
        "float64": 0.0,
        "uuid": ZERO_UUID,
        "string": "",
        "bytes": b"",
    }.get(element, 0)


def message(name: str, valid: str, flexible: str, *fields: Field, api_key: int | None = None) -> Schema:
    return Schema(name, Versions.parse(valid), Versions.parse(flexible), tuple(fields), api_key)


# --- __consumer_offsets: the key's int16 version is the record type -------------------------------------

OFFSET_COMMIT_KEY = message(
    "OffsetCommitKey", "0-1", "none",
    f("group", "string", "0-1"),
    f("topic", "string", "0-1"),
    f("partition", "int32", "0-1"),
)  # fmt: skip

OFFSET_COMMIT_VALUE = message(
    "OffsetCommitValue", "0-4", "4+",
    f("offset", "int64", "0+"),
    f("leaderEpoch", "int32", "3+", default=-1, ignorable=True),
    f("metadata", "string", "0+"),
    f("commitTimestamp", "int64", "0+"),
    f("expireTimestamp", "int64", "1", default=-1, ignorable=True),
)  # fmt: skip

GROUP_METADATA_KEY = message(
    "GroupMetadataKey", "2", "none",
    f("group", "string", "2"),
)  # fmt: skip

GROUP_METADATA_VALUE = message(
    "GroupMetadataValue", "0-4", "4+",
    f("protocolType", "string", "0+"),
    f("generation", "int32", "0+"),
    f("protocol", "string", "0+", nullable="0+"),
    f("leader", "string", "0+", nullable="0+"),
    f("currentStateTimestamp", "int64", "2+", default=-1, ignorable=True),
    f("members", "[]MemberMetadata", "0+", fields=(
        f("memberId", "string", "0+"),
        f("groupInstanceId", "string", "3+", nullable="3+", default=None, ignorable=True),
        f("clientId", "string", "0+"),
        f("clientHost", "string", "0+"),
        f("rebalanceTimeout", "int32", "1+", default=-1, ignorable=True),
        f("sessionTimeout", "int32", "0+"),
        f("subscription", "bytes", "0+"),
        f("assignment", "bytes", "0+"),
    )),
)  # fmt: skip

_TOPIC_PARTITIONS = (
    f("TopicId", "uuid", "0+"),
    f("Partitions", "[]int32", "0+"),
)

# KIP-848 consumer-group records (3.8+; type 16 from 4.0, the tagged MetadataHash from 4.1). Keys are
# non-flexible and read with version = record type.
CONSUMER_GROUP_RECORDS: dict[int, tuple[Schema, Schema]] = {
    3: (
        message("ConsumerGroupMetadataKey", "3", "none", f("GroupId", "string", "3")),
        message(
            "ConsumerGroupMetadataValue", "0", "0+",
            f("Epoch", "int32", "0+"),
            f("MetadataHash", "int64", "0+", tagged="0+", tag=0, default=0),  # Kafka 4.1 (KIP-1101)
        ),
    ),
    4: (
        message("ConsumerGroupPartitionMetadataKey", "4", "none", f("GroupId", "string", "4")),
        message(
            "ConsumerGroupPartitionMetadataValue", "0", "0+",
            f("Topics", "[]TopicMetadata", "0+", fields=(
                f("TopicId", "uuid", "0+"),
                f("TopicName", "string", "0+"),
                f("NumPartitions", "int32", "0+"),
                f("PartitionMetadata", "[]PartitionMetadata", "0+", fields=(
                    f("Partition", "int32", "0+"),
                    f("Racks", "[]string", "0+"),
                )),
            )),
        ),
    ),
    5: (
        message(
            "ConsumerGroupMemberMetadataKey", "5", "none",
            f("GroupId", "string", "5"),
            f("MemberId", "string", "5"),
        ),
        message(
            "ConsumerGroupMemberMetadataValue", "0", "0+",
            f("InstanceId", "string", "0+", nullable="0+"),
            f("RackId", "string", "0+", nullable="0+"),
            f("ClientId", "string", "0+"),
            f("ClientHost", "string", "0+"),
            f("SubscribedTopicNames", "[]string", "0+"),
            f("SubscribedTopicRegex", "string", "0+", nullable="0+"),
            f("RebalanceTimeoutMs", "int32", "0+", default=-1),
            f("ServerAssignor", "string", "0+", nullable="0+"),
            f("ClassicMemberMetadata", "ClassicMemberMetadata", "0+", nullable="0+", default=None,
              tagged="0+", tag=0, fields=(
                f("SessionTimeoutMs", "int32", "0+"),
                f("SupportedProtocols", "[]ClassicProtocol", "0+", fields=(
                    f("Name", "string", "0+"),
                    f("Metadata", "bytes", "0+"),
                )),
            )),
        ),
    ),
    6: (
        message("ConsumerGroupTargetAssignmentMetadataKey", "6", "none", f("GroupId", "string", "6")),
        message("ConsumerGroupTargetAssignmentMetadataValue", "0", "0+", f("AssignmentEpoch", "int32", "0+")),
    ),
    7: (
        message(
            "ConsumerGroupTargetAssignmentMemberKey", "7", "none",
            f("GroupId", "string", "7"),
            f("MemberId", "string", "7"),
        ),
        message(
            "ConsumerGroupTargetAssignmentMemberValue", "0", "0+",
            f("TopicPartitions", "[]TopicPartition", "0+", fields=_TOPIC_PARTITIONS),
        ),
    ),
    8: (
        message(
            "ConsumerGroupCurrentMemberAssignmentKey", "8", "none",
            f("GroupId", "string", "8"),
            f("MemberId", "string", "8"),
        ),
        message(
            "ConsumerGroupCurrentMemberAssignmentValue", "0", "0+",
            f("MemberEpoch", "int32", "0+"),
            f("PreviousMemberEpoch", "int32", "0+"),
            f("State", "int8", "0+"),
            f("AssignedPartitions", "[]TopicPartitions", "0+", fields=_TOPIC_PARTITIONS),
            f("PartitionsPendingRevocation", "[]TopicPartitions", "0+", fields=_TOPIC_PARTITIONS),
        ),
    ),
    16: (  # Kafka 4.0+: a subscribed regular expression as the coordinator last resolved it
        message(
            "ConsumerGroupRegularExpressionKey", "16", "none",
            f("GroupId", "string", "16"),
            f("RegularExpression", "string", "16"),
        ),
        message(
            "ConsumerGroupRegularExpressionValue", "0", "0+",
            f("Topics", "[]string", "0+"),
            f("Version", "int64", "0+"),
            f("Timestamp", "int64", "0+"),
        ),
    ),
}  # fmt: skip

# record type -> (key schema, value schema), as GroupCoordinatorRecordSerde maps them (share and streams
# group records are not here: Kafka's loader skips what it does not know, and so does kcli's).
COORDINATOR_RECORDS: dict[int, tuple[Schema, Schema]] = {
    0: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    1: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    2: (GROUP_METADATA_KEY, GROUP_METADATA_VALUE),
    **CONSUMER_GROUP_RECORDS,
}

# --- __transaction_state -----------------------------------------------------------------------------------

TRANSACTION_LOG_KEY = message(
    "TransactionLogKey", "0", "none",
    f("TransactionalId", "string", "0"),
)  # fmt: skip

TRANSACTION_LOG_VALUE = message(
    "TransactionLogValue", "0-1", "1+",
    f("ProducerId", "int64", "0+"),
    f("PreviousProducerId", "int64", tagged="1+", tag=0, default=-1),
    f("NextProducerId", "int64", tagged="1+", tag=1, default=-1),
    f("ProducerEpoch", "int16", "0+"),
    f("TransactionTimeoutMs", "int32", "0+"),
    f("TransactionStatus", "int8", "0+"),
    f("TransactionPartitions", "[]PartitionsSchema", "0+", nullable="0+", fields=(
        f("Topic", "string", "0+"),
        f("PartitionIds", "[]int32", "0+"),
    )),
    f("TransactionLastUpdateTimestampMs", "int64", "0+"),
    f("TransactionStartTimestampMs", "int64", "0+"),
    f("ClientTransactionVersion", "int16", tagged="1+", tag=2, default=0),
)  # fmt: skip

# --- __cluster_metadata (every version is flexible) -----------------------------------------------------


def _metadata(api_key: int, name: str, valid: str, *fields: Field) -> Schema:
    return message(name, valid, "0+", *fields, api_key=api_key)


_ENDPOINT = (
    f("Name", "string", "0+"),
    f("Host", "string", "0+"),
    f("Port", "uint16", "0+"),
    f("SecurityProtocol", "int16", "0+"),
)
_FEATURE = (
    f("Name", "string", "0+"),
    f("MinSupportedVersion", "int16", "0+"),
    f("MaxSupportedVersion", "int16", "0+"),
)

_METADATA_SCHEMAS = (
    _metadata(
        0, "RegisterBrokerRecord", "0-3",
        f("BrokerId", "int32", "0+"),
        f("IsMigratingZkBroker", "bool", "2+", default=False),
        f("IncarnationId", "uuid", "0+"),
        f("BrokerEpoch", "int64", "0+"),
        f("EndPoints", "[]BrokerEndpoint", "0+", fields=_ENDPOINT),
        f("Features", "[]BrokerFeature", "0+", fields=_FEATURE),
        f("Rack", "string", "0+", nullable="0+"),
        f("Fenced", "bool", "0+", default=True),
        f("InControlledShutdown", "bool", "1+", default=False),
        f("LogDirs", "[]uuid", "3+", tagged="3+", tag=0),
    ),
    _metadata(
        1, "UnregisterBrokerRecord", "0",
        f("BrokerId", "int32", "0+"),
        f("BrokerEpoch", "int64", "0+"),
    ),
    _metadata(
        2, "TopicRecord", "0",
        f("Name", "string", "0+"),
        f("TopicId", "uuid", "0+"),
    ),
    _metadata(
        3, "PartitionRecord", "0-2",
        f("PartitionId", "int32", "0+", default=-1),
        f("TopicId", "uuid", "0+"),
        f("Replicas", "[]int32", "0+"),
        f("Isr", "[]int32", "0+"),
        f("RemovingReplicas", "[]int32", "0+"),
        f("AddingReplicas", "[]int32", "0+"),
        f("Leader", "int32", "0+", default=-1),
        f("LeaderRecoveryState", "int8", "0+", default=0, tagged="0+", tag=0),
        f("LeaderEpoch", "int32", "0+", default=-1),
        f("PartitionEpoch", "int32", "0+", default=-1),
        f("Directories", "[]uuid", "1+"),
        f("EligibleLeaderReplicas", "[]int32", "2+", default=None, nullable="2+", tagged="2+", tag=1),
        f("LastKnownElr", "[]int32", "2+", default=None, nullable="2+", tagged="2+", tag=2),
    ),
    _metadata(
        4, "ConfigRecord", "0",
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("Name", "string", "0+"),
        f("Value", "string", "0+", nullable="0+"),
    ),
    _metadata(
        5, "PartitionChangeRecord", "0-2",
        f("PartitionId", "int32", "0+", default=-1),
        f("TopicId", "uuid", "0+"),
        f("Isr", "[]int32", "0+", default=None, nullable="0+", tagged="0+", tag=0),
        f("Leader", "int32", "0+", default=-2, tagged="0+", tag=1),
        f("Replicas", "[]int32", "0+", default=None, nullable="0+", tagged="0+", tag=2),
        f("RemovingReplicas", "[]int32", "0+", default=None, nullable="0+", tagged="0+", tag=3),
        f("AddingReplicas", "[]int32", "0+", default=None, nullable="0+", tagged="0+", tag=4),
        f("LeaderRecoveryState", "int8", "0+", default=-1, tagged="0+", tag=5),
        f("Directories", "[]uuid", "1+", default=None, nullable="1+", tagged="1+", tag=8),
        f("EligibleLeaderReplicas", "[]int32", "2+", default=None, nullable="2+", tagged="2+", tag=6),
        f("LastKnownElr", "[]int32", "2+", default=None, nullable="2+", tagged="2+", tag=7),
    ),
    _metadata(
        7, "FenceBrokerRecord", "0",
        f("Id", "int32", "0+"),
        f("Epoch", "int64", "0+"),
    ),
    _metadata(
        8, "UnfenceBrokerRecord", "0",
        f("Id", "int32", "0+"),
        f("Epoch", "int64", "0+"),
    ),
    _metadata(
        9, "RemoveTopicRecord", "0",
        f("TopicId", "uuid", "0+"),
    ),
    _metadata(
        10, "DelegationTokenRecord", "0",
        f("Owner", "string", "0+"),
        f("Requester", "string", "0+"),
        f("Renewers", "[]string", "0+"),
        f("IssueTimestamp", "int64", "0+"),
        f("MaxTimestamp", "int64", "0+"),
        f("ExpirationTimestamp", "int64", "0+"),
        f("TokenId", "string", "0+"),
    ),
    _metadata(
        11, "UserScramCredentialRecord", "0",
        f("Name", "string", "0+"),
        f("Mechanism", "int8", "0+"),
        f("Salt", "bytes", "0+"),
        f("StoredKey", "bytes", "0+"),
        f("ServerKey", "bytes", "0+"),
        f("Iterations", "int32", "0+"),
    ),
    _metadata(
        12, "FeatureLevelRecord", "0",
        f("Name", "string", "0+"),
        f("FeatureLevel", "int16", "0+"),
    ),
    _metadata(
        14, "ClientQuotaRecord", "0",
        f("Entity", "[]EntityData", "0+", fields=(
            f("EntityType", "string", "0+"),
            f("EntityName", "string", "0+", nullable="0+"),
        )),
        f("Key", "string", "0+"),
        f("Value", "float64", "0+"),
        f("Remove", "bool", "0+"),
    ),
    _metadata(
        15, "ProducerIdsRecord", "0",
        f("BrokerId", "int32", "0+"),
        f("BrokerEpoch", "int64", "0+", default=-1),
        f("NextProducerId", "int64", "0+"),
    ),
    _metadata(
        17, "BrokerRegistrationChangeRecord", "0-2",
        f("BrokerId", "int32", "0+"),
        f("BrokerEpoch", "int64", "0+"),
        f("Fenced", "int8", "0+", tagged="0+", tag=0),
        f("InControlledShutdown", "int8", "1+", tagged="1+", tag=1),
        f("LogDirs", "[]uuid", "2+", tagged="2+", tag=2),
    ),
    _metadata(
        18, "AccessControlEntryRecord", "0",
        f("Id", "uuid", "0+"),
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("PatternType", "int8", "0+"),
        f("Principal", "string", "0+"),
        f("Host", "string", "0+"),
        f("Operation", "int8", "0+"),
        f("PermissionType", "int8", "0+"),
    ),
    _metadata(
        19, "RemoveAccessControlEntryRecord", "0",
        f("Id", "uuid", "0+"),
    ),
    _metadata(20, "NoOpRecord", "0"),
    _metadata(
        21, "ZkMigrationStateRecord", "0",
        f("ZkMigrationState", "int8", "0+"),
    ),
    _metadata(
        22, "RemoveUserScramCredentialRecord", "0",
        f("Name", "string", "0+"),
        f("Mechanism", "int8", "0+"),
    ),
    _metadata(
        23, "BeginTransactionRecord", "0",
        f("Name", "string", "0+", default=None, nullable="0+", tagged="0+", tag=0),
    ),
    _metadata(24, "EndTransactionRecord", "0"),
    _metadata(
        25, "AbortTransactionRecord", "0",
        f("Reason", "string", "0+", default=None, nullable="0+", tagged="0+", tag=0),
    ),
    _metadata(
        26, "RemoveDelegationTokenRecord", "0",
        f("TokenId", "string", "0+"),
    ),
    _metadata(
        27, "RegisterControllerRecord", "0",
        f("ControllerId", "int32", "0+"),
        f("IncarnationId", "uuid", "0+"),
        f("ZkMigrationReady", "bool", "0+"),
        f("EndPoints", "[]ControllerEndpoint", "0+", fields=_ENDPOINT),
        f("Features", "[]ControllerFeature", "0+", fields=_FEATURE),
    ),
    _metadata(
        28, "ClearElrRecord", "0",
        f("TopicName", "string", "0+"),
    ),
)  # fmt: skip

# apiKey -> schema, the MetadataRecordType table.
METADATA_RECORDS: dict[int, Schema] = {schema.api_key: schema for schema in _METADATA_SCHEMAS}  # type: ignore[misc]
