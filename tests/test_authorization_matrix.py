"""The authorization matrix, as Kafka's AuthorizerIntegrationTest: every API key the broker and the
controller listener serve, sent by a principal without the ACLs the API needs (the exact error) and
again with them (no authorization error), against a real kcli node and then against Apache Kafka 4.1
with the StandardAuthorizer, whose answers kcli's must equal.

Both nodes run the same way: SASL users (PLAIN on kcli's SASL_PLAINTEXT listener, SCRAM-SHA-512 on the
harness's SASL_SSL one for Kafka), `authorizer.class.name` set, `super.users=User:admin`, and
`allow.everyone.if.no.acl.found=true` with an ALLOW for User:nobody on the `*` of every resource type
and on the cluster: every resource has ACLs, so User:alice is denied until given hers, while the node's
own controller traffic (User:ANONYMOUS on the PLAINTEXT controller listener, from 127.0.0.1) is allowed
by an ACL for that host. The controller-listener APIs are sent as User:ANONYMOUS from 127.0.0.2, a
loopback alias, which that ACL does not cover until the case grants its operation for 127.0.0.2.

The allowed side asks for things that cannot hurt the node (a wrong cluster id on the Raft APIs, an
unregistered broker id, validate_only where there is one), so its answer is often an error of its
own; what counts there is that no authorization error comes back, and that Kafka answers the same:
every row's error codes on both sides, and the authorized-operations fields of the allowed answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    KCLI,
    BrokerProcess,
    _kafka_cluster,
    free_port_range,
    kcli_env,
    start_with_config,
    stop_cleanly,
)
from kio.schema.errors import ErrorCode

from kcli.client import ClientError, KafkaClient
from kcli.protocol.envelope import FORWARDABLE, envelope
from kcli.protocol.messages import default_entity, nested_type, request_type
from kcli.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from kcli.security.client_config import load_client_config

pytestmark = pytest.mark.timeout(600)

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"
CONTROLLER_PEER = "127.0.0.2"
"""The address the controller-listener cases connect from (the node's own traffic comes from 127.0.0.1)."""
TOPIC, DELETED_TOPIC, NEW_TOPIC = "matrix-t", "matrix-del", "matrix-new"
GROUP, CONSUMER_GROUP, TXN = "matrix-g", "matrix-cg", "matrix-tx"
WRONG_CLUSTER = "matrixWrongClusterIdAAA"
METADATA_TOPIC_ID = uuid.UUID(int=1)
SECOND = datetime.timedelta(seconds=1)
AUTHORIZATION_ERRORS = frozenset(
    {
        ErrorCode.topic_authorization_failed,
        ErrorCode.group_authorization_failed,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.transactional_id_authorization_failed,
    }
)
AUTHORIZER_PROPERTIES = {
    "authorizer.class.name": AUTHORIZER,
    "super.users": "User:admin",
    "allow.everyone.if.no.acl.found": "true",
}

Acl = tuple[ResourceType, str, AclOperation]


@dataclass(frozen=True)
class Env:
    """What the requests name: the topic's id and the highest version kcli serves of each API."""

    topic_id: uuid.UUID
    versions: dict[int, int]
    mechanism: str = "PLAIN"
    """The SASL mechanism the node's listener logs alice in with (a SaslHandshake names it)."""


@dataclass(frozen=True)
class Case:
    """One row: the API, what the principal needs, the request, the error without the ACLs (None: the
    API checks nothing, or nothing the principal lacks, and answers the same both times)."""

    name: str
    api_key: int
    needs: tuple[Acl, ...]
    request: Callable[[int, Env], Any]
    denied: ErrorCode | None
    controller: bool = False
    granted: tuple[Acl, ...] = ()
    """ACLs the principal holds on both sides (so that the row tests the one it lacks)."""
    highest: int | None = None
    """A version cap (AddPartitionsToTxn up to v3 is the client's, from v4 the brokers')."""


def mk(cls: type, **values: Any) -> Any:
    """A kio entity with the fields this version has among `values`, the others at their defaults."""
    entity = default_entity(cls, ErrorCode.none, None)
    names = {f.name for f in dataclasses.fields(cls)}
    return dataclasses.replace(entity, **{k: v for k, v in values.items() if k in names})


def sub(parent: type, entity: str, /, **values: Any) -> Any:
    """A nested entity of `parent`'s schema version, or None when that version has no such entity."""
    try:
        return mk(nested_type(parent, entity), **values)
    except AttributeError:
        return None


def req(api_key: int, version: int, **values: Any) -> Any:
    return mk(request_type(api_key, version), **values)


def _batch() -> bytes:
    from formats.records import RecordSpec, build_batch

    return build_batch([RecordSpec(int(time.time() * 1000), b"k", b"v")])


def _produce(v: int, env: Env) -> Any:
    cls = request_type(0, v)
    data = sub(
        cls,
        "TopicProduceData",
        name=TOPIC,
        topic_id=env.topic_id,
        partition_data=(sub(cls, "PartitionProduceData", index=0, records=_batch()),),
    )
    return req(0, v, acks=1, timeout=10 * SECOND, topic_data=(data,))


def _fetch(v: int, env: Env) -> Any:
    cls = request_type(1, v)
    part = sub(
        cls,
        "FetchPartition",
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    topic = sub(cls, "FetchTopic", topic=TOPIC, topic_id=env.topic_id, partitions=(part,))
    return req(
        1,
        v,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=(topic,),
        rack_id="",
    )


def _raft_fetch(v: int, env: Env) -> Any:
    cls = request_type(1, v)
    part = sub(
        cls,
        "FetchPartition",
        partition=0,
        current_leader_epoch=0,
        fetch_offset=0,
        last_fetched_epoch=0,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    topic = sub(cls, "FetchTopic", topic="__cluster_metadata", topic_id=METADATA_TOPIC_ID, partitions=(part,))
    return req(
        1,
        v,
        cluster_id=WRONG_CLUSTER,
        replica_state=sub(cls, "ReplicaState", replica_id=99, replica_epoch=-1),
        max_wait=datetime.timedelta(0),
        max_bytes=1 << 20,
        topics=(topic,),
    )


def _list_offsets(v: int, env: Env) -> Any:
    cls = request_type(2, v)
    part = sub(cls, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1, timestamp=-1)
    return req(
        2,
        v,
        replica_id=-1,
        topics=(sub(cls, "ListOffsetsTopic", name=TOPIC, partitions=(part,)),),
        timeout=10 * SECOND,
    )


def _metadata(v: int, env: Env) -> Any:
    cls = request_type(3, v)
    topic = sub(cls, "MetadataRequestTopic", name=TOPIC, topic_id=uuid.UUID(int=0))
    return req(
        3, v, topics=(topic,), allow_auto_topic_creation=False, include_topic_authorized_operations=True
    )


def _offset_commit(v: int, env: Env) -> Any:
    cls = request_type(8, v)
    part = sub(
        cls,
        "OffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=0,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    topic = sub(cls, "OffsetCommitRequestTopic", name=TOPIC, topic_id=env.topic_id, partitions=(part,))
    return req(8, v, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=(topic,))


def _offset_fetch(v: int, env: Env) -> Any:
    cls = request_type(9, v)
    topic = sub(cls, "OffsetFetchRequestTopics", name=TOPIC, topic_id=env.topic_id, partition_indexes=(0,))
    group = sub(
        cls, "OffsetFetchRequestGroup", group_id=GROUP, member_id=None, member_epoch=-1, topics=(topic,)
    )
    return req(9, v, groups=(group,), group_id=GROUP, topics=(topic,))


def _join_group(v: int, env: Env) -> Any:
    cls = request_type(11, v)
    protocol = sub(cls, "JoinGroupRequestProtocol", name="range", metadata=b"")
    return req(
        11,
        v,
        group_id=GROUP,
        session_timeout=10 * SECOND,
        rebalance_timeout=10 * SECOND,
        member_id="",
        protocol_type="consumer",
        protocols=(protocol,),
    )


def _leave_group(v: int, env: Env) -> Any:
    cls = request_type(13, v)
    return req(
        13,
        v,
        group_id=GROUP,
        member_id="m",
        members=(sub(cls, "MemberIdentity", member_id="m", group_instance_id=None),),
    )


def _create_topics(v: int, env: Env) -> Any:
    cls = request_type(19, v)
    topic = sub(cls, "CreatableTopic", name=NEW_TOPIC, num_partitions=1, replication_factor=1)
    return req(19, v, topics=(topic,), timeout=10 * SECOND, validate_only=False)


def _delete_topics(v: int, env: Env) -> Any:
    cls = request_type(20, v)
    state = sub(cls, "DeleteTopicState", name=DELETED_TOPIC, topic_id=uuid.UUID(int=0))
    return req(20, v, topics=(state,), topic_names=(DELETED_TOPIC,), timeout=10 * SECOND)


def _delete_records(v: int, env: Env) -> Any:
    cls = request_type(21, v)
    part = sub(cls, "DeleteRecordsPartition", partition_index=0, offset=0)
    return req(
        21, v, topics=(sub(cls, "DeleteRecordsTopic", name=TOPIC, partitions=(part,)),), timeout=10 * SECOND
    )


def _offset_for_leader_epoch(v: int, env: Env) -> Any:
    cls = request_type(23, v)
    part = sub(cls, "OffsetForLeaderPartition", partition=0, current_leader_epoch=-1, leader_epoch=0)
    return req(
        23, v, replica_id=-1, topics=(sub(cls, "OffsetForLeaderTopic", topic=TOPIC, partitions=(part,)),)
    )


def _add_partitions_to_txn(v: int, env: Env) -> Any:
    cls = request_type(24, v)
    topic = sub(cls, "AddPartitionsToTxnTopic", name=TOPIC, partitions=(0,))
    transaction = sub(
        cls,
        "AddPartitionsToTxnTransaction",
        transactional_id=TXN,
        producer_id=1,
        producer_epoch=0,
        verify_only=True,
        topics=(topic,),
    )
    return req(
        24,
        v,
        transactions=(transaction,),
        v3_and_below_transactional_id=TXN,
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=(topic,),
        transactional_id=TXN,
        producer_id=1,
        producer_epoch=0,
        topics=(topic,),
    )


def _write_txn_markers(v: int, env: Env) -> Any:
    cls = request_type(27, v)
    topic = sub(cls, "WritableTxnMarkerTopic", name="matrix-nope", partition_indexes=(0,))
    marker = sub(
        cls,
        "WritableTxnMarker",
        producer_id=1,
        producer_epoch=0,
        transaction_result=True,
        topics=(topic,),
        coordinator_epoch=0,
    )
    return req(27, v, markers=(marker,))


def _txn_offset_commit(v: int, env: Env) -> Any:
    cls = request_type(28, v)
    part = sub(
        cls,
        "TxnOffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=0,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    return req(
        28,
        v,
        transactional_id=TXN,
        group_id=GROUP,
        producer_id=1,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        topics=(sub(cls, "TxnOffsetCommitRequestTopic", name=TOPIC, partitions=(part,)),),
    )


def _acl_fields() -> dict[str, Any]:
    return dict(
        resource_type=int(ResourceType.TOPIC),
        resource_name="matrix-acl",
        resource_pattern_type=int(PatternType.LITERAL),
        principal="User:nobody",
        host="*",
        operation=int(AclOperation.READ),
        permission_type=int(AclPermissionType.ALLOW),
    )


def _delete_acls(v: int, env: Env) -> Any:
    cls = request_type(31, v)
    f = _acl_fields()
    acl_filter = sub(
        cls,
        "DeleteAclsFilter",
        resource_type_filter=f["resource_type"],
        resource_name_filter=f["resource_name"],
        pattern_type_filter=f["resource_pattern_type"],
        principal_filter=f["principal"],
        host_filter="*",
        operation=f["operation"],
        permission_type=f["permission_type"],
    )
    return req(31, v, filters=(acl_filter,))


def _topic_configs(api_key: int, v: int, **config: Any) -> Any:
    cls = request_type(api_key, v)
    name = "DescribeConfigsResource" if api_key == 32 else "AlterConfigsResource"
    configs = (
        ()
        if api_key == 32
        else (sub(cls, "AlterableConfig", name="retention.ms", value="86400000", **config),)
    )
    resource = sub(cls, name, resource_type=2, resource_name=TOPIC, configuration_keys=None, configs=configs)
    return req(api_key, v, resources=(resource,), validate_only=True)


def _alter_replica_log_dirs(v: int, env: Env) -> Any:
    cls = request_type(34, v)
    topic = sub(cls, "AlterReplicaLogDirTopic", name=TOPIC, partitions=(0,))
    return req(34, v, dirs=(sub(cls, "AlterReplicaLogDir", path="/nonexistent-matrix-dir", topics=(topic,)),))


def _create_partitions(v: int, env: Env) -> Any:
    cls = request_type(37, v)
    topic = sub(cls, "CreatePartitionsTopic", name=TOPIC, count=2, assignments=None)
    return req(37, v, topics=(topic,), timeout=10 * SECOND, validate_only=True)


def _elect_leaders(v: int, env: Env) -> Any:
    cls = request_type(43, v)
    return req(
        43,
        v,
        election_type=0,
        timeout=10 * SECOND,
        topic_partitions=(sub(cls, "TopicPartitions", topic=TOPIC, partitions=(0,)),),
    )


def _alter_reassignments(v: int, env: Env) -> Any:
    cls = request_type(45, v)
    part = sub(cls, "ReassignablePartition", partition_index=0, replicas=None)
    return req(
        45, v, timeout=10 * SECOND, topics=(sub(cls, "ReassignableTopic", name=TOPIC, partitions=(part,)),)
    )


def _offset_delete(v: int, env: Env) -> Any:
    cls = request_type(47, v)
    part = sub(cls, "OffsetDeleteRequestPartition", partition_index=0)
    return req(
        47, v, group_id=GROUP, topics=(sub(cls, "OffsetDeleteRequestTopic", name=TOPIC, partitions=(part,)),)
    )


def _alter_client_quotas(v: int, env: Env) -> Any:
    cls = request_type(49, v)
    entry = sub(
        cls,
        "EntryData",
        entity=(sub(cls, "EntityData", entity_type="user", entity_name="matrix-user"),),
        ops=(sub(cls, "OpData", key="producer_byte_rate", value=1024.0, remove=False),),
    )
    return req(49, v, entries=(entry,), validate_only=True)


def _alter_scram(v: int, env: Env) -> Any:
    cls = request_type(51, v)
    deletion = sub(cls, "ScramCredentialDeletion", name="matrix-nobody", mechanism=2)
    return req(51, v, deletions=(deletion,), upsertions=())


def _describe_quorum(v: int, env: Env) -> Any:
    cls = request_type(55, v)
    part = sub(cls, "PartitionData", partition_index=0)
    return req(55, v, topics=(sub(cls, "TopicData", topic_name="__cluster_metadata", partitions=(part,)),))


def _describe_producers(v: int, env: Env) -> Any:
    cls = request_type(61, v)
    return req(61, v, topics=(sub(cls, "TopicRequest", name=TOPIC, partition_indexes=(0,)),))


def _consumer_group_heartbeat(v: int, env: Env) -> Any:
    return req(
        68,
        v,
        group_id=CONSUMER_GROUP,
        member_id=str(uuid.uuid4()),
        member_epoch=0,
        rebalance_timeout=10 * SECOND,
        subscribed_topic_names=(TOPIC,),
        topic_partitions=(),
    )


def _consumer_group_describe(v: int, env: Env) -> Any:
    """The group ConsumerGroupHeartbeat's row joined: its member subscribes to TOPIC."""
    return req(69, v, group_ids=(CONSUMER_GROUP,), include_authorized_operations=True)


def _describe_topic_partitions(v: int, env: Env) -> Any:
    cls = request_type(75, v)
    return req(
        75, v, topics=(sub(cls, "TopicRequest", name=TOPIC),), response_partition_limit=100, cursor=None
    )


def _add_raft_voter(v: int, env: Env) -> Any:
    cls = request_type(80, v)
    listener = sub(cls, "Listener", name="CONTROLLER", host="127.0.0.1", port=1)
    return req(
        80,
        v,
        cluster_id=WRONG_CLUSTER,
        timeout=SECOND,
        voter_id=99,
        voter_directory_id=uuid.uuid4(),
        listeners=(listener,),
        ack_when_committed=True,
    )


def _raft_partition(api_key: int, v: int, **values: Any) -> Any:
    cls = request_type(api_key, v)
    part = sub(cls, "PartitionData", partition_index=0, **values)
    return cls, sub(cls, "TopicData", topic_name="__cluster_metadata", partitions=(part,))


def _vote(v: int, env: Env) -> Any:
    _, topic = _raft_partition(
        52,
        v,
        replica_epoch=0,
        replica_id=99,
        replica_directory_id=uuid.uuid4(),
        voter_directory_id=uuid.uuid4(),
        last_offset_epoch=0,
        last_offset=0,
    )
    return req(52, v, cluster_id=WRONG_CLUSTER, voter_id=1, topics=(topic,))


def _begin_quorum_epoch(v: int, env: Env) -> Any:
    cls, topic = _raft_partition(53, v, voter_directory_id=uuid.uuid4(), leader_id=99, leader_epoch=0)
    endpoint = sub(cls, "LeaderEndpoint", name="CONTROLLER", host="127.0.0.1", port=1)
    return req(53, v, cluster_id=WRONG_CLUSTER, voter_id=1, topics=(topic,), leader_endpoints=(endpoint,))


def _end_quorum_epoch(v: int, env: Env) -> Any:
    cls, topic = _raft_partition(54, v, leader_id=99, leader_epoch=0, preferred_candidates=())
    endpoint = sub(cls, "LeaderEndpoint", name="CONTROLLER", host="127.0.0.1", port=1)
    return req(54, v, cluster_id=WRONG_CLUSTER, topics=(topic,), leader_endpoints=(endpoint,))


def _fetch_snapshot(v: int, env: Env) -> Any:
    cls = request_type(59, v)
    part = sub(
        cls,
        "PartitionSnapshot",
        partition=0,
        current_leader_epoch=0,
        snapshot_id=sub(cls, "SnapshotId", end_offset=0, epoch=0),
        position=0,
    )
    topic = sub(cls, "TopicSnapshot", name="__cluster_metadata", partitions=(part,))
    return req(59, v, cluster_id=WRONG_CLUSTER, replica_id=99, max_bytes=1 << 20, topics=(topic,))


def _broker_registration(v: int, env: Env) -> Any:
    cls = request_type(62, v)
    listener = sub(cls, "Listener", name="SASL_PLAINTEXT", host="127.0.0.1", port=1, security_protocol=2)
    return req(
        62,
        v,
        broker_id=99,
        cluster_id=WRONG_CLUSTER,
        incarnation_id=uuid.uuid4(),
        listeners=(listener,),
        features=(),
        rack=None,
        log_dirs=(uuid.uuid4(),),
        previous_broker_epoch=-1,
    )


def _update_raft_voter(v: int, env: Env) -> Any:
    cls = request_type(82, v)
    listener = sub(cls, "Listener", name="CONTROLLER", host="127.0.0.1", port=1)
    feature = sub(cls, "KRaftVersionFeature", min_supported_version=0, max_supported_version=1)
    return req(
        82,
        v,
        cluster_id=WRONG_CLUSTER,
        current_leader_epoch=0,
        voter_id=99,
        voter_directory_id=uuid.uuid4(),
        listeners=(listener,),
        k_raft_version_feature=feature,
    )


def _envelope(v: int, env: Env) -> Any:
    inner = _describe_quorum(0, env)
    return envelope(inner, principal="User:alice", client_id="matrix", peer="127.0.0.1:1", correlation_id=1)


T, G, X, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER
Op = AclOperation
E = ErrorCode
CASES: list[Case] = [
    Case("Produce", 0, ((T, TOPIC, Op.WRITE),), _produce, E.topic_authorization_failed),
    Case("Fetch", 1, ((T, TOPIC, Op.READ),), _fetch, E.topic_authorization_failed),
    Case("ListOffsets", 2, ((T, TOPIC, Op.DESCRIBE),), _list_offsets, E.topic_authorization_failed),
    Case("Metadata", 3, ((T, TOPIC, Op.DESCRIBE),), _metadata, E.topic_authorization_failed),
    Case(
        "OffsetCommit",
        8,
        ((G, GROUP, Op.READ), (T, TOPIC, Op.READ)),
        _offset_commit,
        E.group_authorization_failed,
    ),
    Case(
        "OffsetFetch",
        9,
        ((G, GROUP, Op.DESCRIBE), (T, TOPIC, Op.DESCRIBE)),
        _offset_fetch,
        E.group_authorization_failed,
    ),
    Case(
        "FindCoordinator",
        10,
        ((G, GROUP, Op.DESCRIBE),),
        lambda v, e: req(10, v, key_type=0, key=GROUP, coordinator_keys=(GROUP,)),
        E.group_authorization_failed,
    ),
    Case("JoinGroup", 11, ((G, GROUP, Op.READ),), _join_group, E.group_authorization_failed),
    Case(
        "Heartbeat",
        12,
        ((G, GROUP, Op.READ),),
        lambda v, e: req(12, v, group_id=GROUP, generation_id=1, member_id="m"),
        E.group_authorization_failed,
    ),
    Case("LeaveGroup", 13, ((G, GROUP, Op.READ),), _leave_group, E.group_authorization_failed),
    Case(
        "SyncGroup",
        14,
        ((G, GROUP, Op.READ),),
        lambda v, e: req(
            14,
            v,
            group_id=GROUP,
            generation_id=1,
            member_id="m",
            protocol_type="consumer",
            protocol_name="range",
            assignments=(),
        ),
        E.group_authorization_failed,
    ),
    Case(
        "DescribeGroups",
        15,
        ((G, GROUP, Op.DESCRIBE),),
        lambda v, e: req(15, v, groups=(GROUP,), include_authorized_operations=True),
        E.group_authorization_failed,
    ),
    Case("ListGroups", 16, (), lambda v, e: req(16, v), None),
    Case("SaslHandshake", 17, (), lambda v, e: req(17, v, mechanism=e.mechanism), None),
    Case(
        "ApiVersions",
        18,
        (),
        lambda v, e: req(18, v, client_software_name="matrix", client_software_version="1"),
        None,
    ),
    Case("CreateTopics", 19, ((T, NEW_TOPIC, Op.CREATE),), _create_topics, E.topic_authorization_failed),
    Case("DeleteTopics", 20, ((T, DELETED_TOPIC, Op.DELETE),), _delete_topics, E.topic_authorization_failed),
    Case("DeleteRecords", 21, ((T, TOPIC, Op.DELETE),), _delete_records, E.topic_authorization_failed),
    Case(
        "InitProducerId",
        22,
        ((X, TXN, Op.WRITE),),
        lambda v, e: req(
            22, v, transactional_id=TXN, transaction_timeout=60 * SECOND, producer_id=-1, producer_epoch=-1
        ),
        E.transactional_id_authorization_failed,
    ),
    Case(
        "OffsetForLeaderEpoch",
        23,
        ((T, TOPIC, Op.DESCRIBE),),
        _offset_for_leader_epoch,
        E.topic_authorization_failed,
    ),
    Case(
        "AddPartitionsToTxn v3",
        24,
        ((X, TXN, Op.WRITE), (T, TOPIC, Op.WRITE)),
        _add_partitions_to_txn,
        E.transactional_id_authorization_failed,
        highest=3,
    ),
    Case(
        "AddPartitionsToTxn",
        24,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _add_partitions_to_txn,
        E.cluster_authorization_failed,
    ),
    Case(
        "AddOffsetsToTxn",
        25,
        ((X, TXN, Op.WRITE), (G, GROUP, Op.READ)),
        lambda v, e: req(25, v, transactional_id=TXN, producer_id=1, producer_epoch=0, group_id=GROUP),
        E.transactional_id_authorization_failed,
    ),
    Case(
        "EndTxn",
        26,
        ((X, TXN, Op.WRITE),),
        lambda v, e: req(26, v, transactional_id=TXN, producer_id=1, producer_epoch=0, committed=True),
        E.transactional_id_authorization_failed,
    ),
    Case(
        "WriteTxnMarkers",
        27,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _write_txn_markers,
        E.cluster_authorization_failed,
    ),
    Case(
        "TxnOffsetCommit",
        28,
        ((X, TXN, Op.WRITE), (G, GROUP, Op.READ), (T, TOPIC, Op.READ)),
        _txn_offset_commit,
        E.transactional_id_authorization_failed,
    ),
    Case(
        "DescribeAcls",
        29,
        ((C, CLUSTER_NAME, Op.DESCRIBE),),
        lambda v, e: req(
            29,
            v,
            resource_type_filter=1,
            resource_name_filter=None,
            pattern_type_filter=1,
            principal_filter=None,
            host_filter=None,
            operation=1,
            permission_type=1,
        ),
        E.cluster_authorization_failed,
    ),
    Case(
        "CreateAcls",
        30,
        ((C, CLUSTER_NAME, Op.ALTER),),
        lambda v, e: req(30, v, creations=(sub(request_type(30, v), "AclCreation", **_acl_fields()),)),
        E.cluster_authorization_failed,
    ),
    Case("DeleteAcls", 31, ((C, CLUSTER_NAME, Op.ALTER),), _delete_acls, E.cluster_authorization_failed),
    Case(
        "DescribeConfigs",
        32,
        ((T, TOPIC, Op.DESCRIBE_CONFIGS),),
        lambda v, e: _topic_configs(32, v),
        E.topic_authorization_failed,
    ),
    Case(
        "AlterConfigs",
        33,
        ((T, TOPIC, Op.ALTER_CONFIGS),),
        lambda v, e: _topic_configs(33, v),
        E.topic_authorization_failed,
    ),
    Case(
        "AlterReplicaLogDirs",
        34,
        ((C, CLUSTER_NAME, Op.ALTER),),
        _alter_replica_log_dirs,
        E.cluster_authorization_failed,
    ),
    Case(
        "DescribeLogDirs",
        35,
        ((C, CLUSTER_NAME, Op.DESCRIBE),),
        lambda v, e: req(35, v, topics=None),
        E.cluster_authorization_failed,
    ),
    Case("SaslAuthenticate", 36, (), lambda v, e: req(36, v, auth_bytes=b"\x00alice\x00alice-secret"), None),
    Case("CreatePartitions", 37, ((T, TOPIC, Op.ALTER),), _create_partitions, E.topic_authorization_failed),
    Case(
        "DeleteGroups",
        42,
        ((G, GROUP, Op.DELETE),),
        lambda v, e: req(42, v, groups_names=(GROUP,)),
        E.group_authorization_failed,
    ),
    Case("ElectLeaders", 43, ((C, CLUSTER_NAME, Op.ALTER),), _elect_leaders, E.cluster_authorization_failed),
    Case(
        "IncrementalAlterConfigs",
        44,
        ((T, TOPIC, Op.ALTER_CONFIGS),),
        lambda v, e: _topic_configs(44, v, config_operation=0),
        E.topic_authorization_failed,
    ),
    Case(
        "AlterPartitionReassignments",
        45,
        ((C, CLUSTER_NAME, Op.ALTER),),
        _alter_reassignments,
        E.cluster_authorization_failed,
    ),
    Case(
        "ListPartitionReassignments",
        46,
        ((C, CLUSTER_NAME, Op.DESCRIBE),),
        lambda v, e: req(46, v, timeout=10 * SECOND, topics=None),
        E.cluster_authorization_failed,
    ),
    Case(
        "OffsetDelete",
        47,
        ((G, GROUP, Op.DELETE), (T, TOPIC, Op.READ)),
        _offset_delete,
        E.group_authorization_failed,
    ),
    Case(
        "DescribeClientQuotas",
        48,
        ((C, CLUSTER_NAME, Op.DESCRIBE_CONFIGS),),
        lambda v, e: req(48, v, components=(), strict=False),
        E.cluster_authorization_failed,
    ),
    Case(
        "AlterClientQuotas",
        49,
        ((C, CLUSTER_NAME, Op.ALTER_CONFIGS),),
        _alter_client_quotas,
        E.cluster_authorization_failed,
    ),
    Case(
        "DescribeUserScramCredentials",
        50,
        ((C, CLUSTER_NAME, Op.DESCRIBE),),
        lambda v, e: req(50, v, users=()),
        E.cluster_authorization_failed,
    ),
    Case(
        "AlterUserScramCredentials",
        51,
        ((C, CLUSTER_NAME, Op.ALTER),),
        _alter_scram,
        E.cluster_authorization_failed,
    ),
    Case(
        "DescribeQuorum",
        55,
        ((C, CLUSTER_NAME, Op.DESCRIBE),),
        _describe_quorum,
        E.cluster_authorization_failed,
    ),
    Case(
        "UpdateFeatures",
        57,
        ((C, CLUSTER_NAME, Op.ALTER),),
        lambda v, e: req(57, v, timeout=10 * SECOND, feature_updates=(), validate_only=True),
        E.cluster_authorization_failed,
    ),
    Case(
        "DescribeCluster",
        60,
        (),
        lambda v, e: req(60, v, include_cluster_authorized_operations=True, endpoint_type=1),
        None,
    ),
    Case("DescribeProducers", 61, ((T, TOPIC, Op.READ),), _describe_producers, E.topic_authorization_failed),
    Case(
        "UnregisterBroker",
        64,
        ((C, CLUSTER_NAME, Op.ALTER),),
        lambda v, e: req(64, v, broker_id=99),
        E.cluster_authorization_failed,
    ),
    Case(
        "DescribeTransactions",
        65,
        ((X, TXN, Op.DESCRIBE),),
        lambda v, e: req(65, v, transactional_ids=(TXN,)),
        E.transactional_id_authorization_failed,
    ),
    Case("ListTransactions", 66, (), lambda v, e: req(66, v), None),
    Case(
        "ConsumerGroupHeartbeat",
        68,
        ((G, CONSUMER_GROUP, Op.READ),),
        _consumer_group_heartbeat,
        E.group_authorization_failed,
        granted=((T, TOPIC, Op.DESCRIBE),),
    ),
    Case(
        "ConsumerGroupHeartbeat (topic)",
        68,
        ((T, TOPIC, Op.DESCRIBE),),
        _consumer_group_heartbeat,
        E.topic_authorization_failed,
        granted=((G, CONSUMER_GROUP, Op.READ),),
    ),
    Case(
        "ConsumerGroupDescribe",
        69,
        ((G, CONSUMER_GROUP, Op.DESCRIBE),),
        _consumer_group_describe,
        E.group_authorization_failed,
        granted=((T, TOPIC, Op.DESCRIBE),),
    ),
    Case(
        "ConsumerGroupDescribe (topic)",
        69,
        ((T, TOPIC, Op.DESCRIBE),),
        _consumer_group_describe,
        E.topic_authorization_failed,
        granted=((G, CONSUMER_GROUP, Op.DESCRIBE),),
    ),
    Case(
        "DescribeTopicPartitions",
        75,
        ((T, TOPIC, Op.DESCRIBE),),
        _describe_topic_partitions,
        E.topic_authorization_failed,
    ),
    Case("AddRaftVoter", 80, ((C, CLUSTER_NAME, Op.ALTER),), _add_raft_voter, E.cluster_authorization_failed),
    Case(
        "RemoveRaftVoter",
        81,
        ((C, CLUSTER_NAME, Op.ALTER),),
        lambda v, e: req(81, v, cluster_id=WRONG_CLUSTER, voter_id=99, voter_directory_id=uuid.uuid4()),
        E.cluster_authorization_failed,
    ),
    # The controller listener, as User:ANONYMOUS from 127.0.0.2.
    Case(
        "Fetch (controller)",
        1,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _raft_fetch,
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "Vote",
        52,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _vote,
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "BeginQuorumEpoch",
        53,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _begin_quorum_epoch,
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "EndQuorumEpoch",
        54,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _end_quorum_epoch,
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "DescribeQuorum (controller)",
        55,
        ((C, CLUSTER_NAME, Op.DESCRIBE),),
        _describe_quorum,
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "AlterPartition",
        56,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        lambda v, e: req(56, v, broker_id=99, broker_epoch=-1, topics=()),
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "Envelope",
        58,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _envelope,
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "FetchSnapshot",
        59,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _fetch_snapshot,
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "DescribeCluster (controller)",
        60,
        ((C, CLUSTER_NAME, Op.ALTER),),
        lambda v, e: req(60, v, include_cluster_authorized_operations=True, endpoint_type=2),
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "BrokerRegistration",
        62,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _broker_registration,
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "BrokerHeartbeat",
        63,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        lambda v, e: req(63, v, broker_id=99, broker_epoch=-1, current_metadata_offset=0),
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "AllocateProducerIds",
        67,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        lambda v, e: req(67, v, broker_id=99, broker_epoch=-1),
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "AssignReplicasToDirs",
        73,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        lambda v, e: req(73, v, broker_id=99, broker_epoch=-1, directories=()),
        E.cluster_authorization_failed,
        controller=True,
    ),
    Case(
        "UpdateRaftVoter",
        82,
        ((C, CLUSTER_NAME, Op.CLUSTER_ACTION),),
        _update_raft_voter,
        E.cluster_authorization_failed,
        controller=True,
    ),
]

RETRIABLE = frozenset(
    {
        E.coordinator_load_in_progress,
        E.coordinator_not_available,
        E.not_coordinator,
        E.concurrent_transactions,
    }
)


def error_codes(response: Any) -> frozenset[ErrorCode]:
    """Every error code a response carries, anywhere in it (NONE left out)."""
    found: set[ErrorCode] = set()

    def walk(value: Any) -> None:
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                item = getattr(value, f.name)
                if f.name == "error_code" or f.metadata.get("kafka_type") == "error_code":
                    if item is not None and int(item) != 0:
                        found.add(ErrorCode(int(item)))
                else:
                    walk(item)
        elif isinstance(value, tuple):
            for item in value:
                walk(item)

    walk(response)
    return frozenset(found)


def authorized_operations(response: Any) -> tuple[tuple[str, int], ...]:
    """Every authorized-operations bit set a response carries that was filled in (Kafka's int32 fields)."""
    found: list[tuple[str, int]] = []

    def walk(value: Any) -> None:
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                item = getattr(value, f.name)
                if f.name.endswith("authorized_operations") and isinstance(item, int) and item != -(2**31):
                    found.append((f.name, item))
                else:
                    walk(item)
        elif isinstance(value, tuple):
            for item in value:
                walk(item)

    walk(response)
    return tuple(found)


@dataclass(frozen=True)
class Target:
    """A node to run the matrix on: where to connect, and how admin and alice log in."""

    bootstrap: str
    controller: str
    admin: Any
    alice: Any
    mechanism: str
    settle: float = 0.0
    """Seconds to wait once DescribeAcls shows an ACL change, where another authorizer than the one
    DescribeAcls reads decides the case and follows the metadata log a moment apart: Kafka's controller
    keeps its own, and a forwarded request is decided on the active controller. kcli's node answers
    DescribeAcls from the authorizer that decides every listener's requests."""
    settle_controller_cases_only: bool = False


@dataclass(frozen=True)
class Row:
    """What one case got: the error codes without the ACLs and with them, by name."""

    denied: tuple[str, ...]
    allowed: tuple[str, ...]
    operations: tuple[tuple[str, int], ...] = ()
    """The authorized-operations fields of the answer with the ACLs."""


def names(codes: frozenset[ErrorCode]) -> tuple[str, ...]:
    return tuple(sorted(c.name.upper() for c in codes))


async def _acl_change(
    admin: KafkaClient, principal: str, host: str, acls: tuple[Acl, ...], *, add: bool, settle: float = 0.0
) -> None:
    """Create (or delete) ALLOW ACLs, wait until DescribeAcls shows the change, then `settle` seconds."""
    if not acls:
        return
    if add:
        cls = admin.request_type(30)
        creations = tuple(
            sub(
                cls,
                "AclCreation",
                resource_type=int(rt),
                resource_name=name,
                resource_pattern_type=3,
                principal=principal,
                host=host,
                operation=int(op),
                permission_type=3,
            )
            for rt, name, op in acls
        )
        response = await admin.send(mk(cls, creations=creations))
    else:
        cls = admin.request_type(31)
        filters = tuple(
            sub(
                cls,
                "DeleteAclsFilter",
                resource_type_filter=int(rt),
                resource_name_filter=name,
                pattern_type_filter=3,
                principal_filter=principal,
                host_filter=host,
                operation=int(op),
                permission_type=3,
            )
            for rt, name, op in acls
        )
        response = await admin.send(mk(cls, filters=filters))
    assert not error_codes(response), response
    deadline = time.monotonic() + 15
    while True:
        found = await admin.send(
            mk(
                admin.request_type(29),
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=principal,
                host_filter=host,
                operation=1,
                permission_type=1,
            )
        )
        present = {(r.resource_type, r.resource_name, a.operation) for r in found.resources for a in r.acls}
        wanted = {(int(rt), name, int(op)) for rt, name, op in acls}
        if (wanted <= present) == add and (add or not wanted & present):
            break
        assert time.monotonic() < deadline, f"ACL change not visible: {acls}"
        await asyncio.sleep(0.1)
    if settle:
        await asyncio.sleep(settle)


CLOSED = "CONNECTION_CLOSED"
"""A row's outcome when the node closes the connection instead of answering."""


async def _send(
    target: Target, case: Case, env: Env, *, retry: bool
) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """The error codes and authorized operations of the case's answer, sent on a new connection (the
    codes are CLOSED if the node closed it)."""
    if case.controller:
        connect = KafkaClient.connect(target.controller, local_address=CONTROLLER_PEER)
    else:
        connect = KafkaClient.connect(target.bootstrap, security=target.alice)
    client = await connect
    try:
        version = client.version(case.api_key, min(env.versions.get(case.api_key, 99), case.highest or 99))
        deadline = time.monotonic() + 20
        while True:
            try:
                response = await client.send(case.request(version, env), timeout=30)
            except ClientError:
                return (CLOSED,), ()
            codes = error_codes(response)
            if not (retry and codes & RETRIABLE) or time.monotonic() > deadline:
                return names(codes), authorized_operations(response)
            await asyncio.sleep(0.3)
    finally:
        await client.close()


async def _setup(target: Target) -> tuple[KafkaClient, Env]:
    admin = await KafkaClient.connect(target.bootstrap, security=target.admin)
    cls = admin.request_type(19)
    topics = tuple(
        sub(cls, "CreatableTopic", name=name, num_partitions=1, replication_factor=1)
        for name in (TOPIC, DELETED_TOPIC)
    )
    await admin.send(mk(cls, topics=topics, timeout=30 * SECOND))
    # User:nobody's wildcard ACLs give every resource ACLs; ANONYMOUS from 127.0.0.1 is the node itself.
    nobody = tuple((rt, "*", Op.ALL) for rt in (T, G, X)) + ((C, CLUSTER_NAME, Op.ALL),)
    # The node's own ACL first: a Kafka broker forwards CreateAcls to its controller as ANONYMOUS.
    await _acl_change(
        admin, "User:ANONYMOUS", "127.0.0.1", ((C, CLUSTER_NAME, Op.ALL),), add=True, settle=target.settle
    )
    await _acl_change(admin, "User:nobody", "*", nobody, add=True, settle=target.settle)
    topic_id = uuid.UUID(int=0)
    deadline = time.monotonic() + 30
    while topic_id == uuid.UUID(int=0) and time.monotonic() < deadline:
        meta = await admin.send(_metadata(admin.version(3), Env(topic_id, {})))
        topic_id = meta.topics[0].topic_id
    for key_type, key in ((0, GROUP), (1, TXN)):  # the coordinators' topics, made before the rows need them
        ask = req(10, admin.version(10), key_type=key_type, key=key, coordinator_keys=(key,))
        while error_codes(await admin.send(ask)) and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
    from kcli.broker.apis import build_registry

    versions = {spec.api_key: spec.max_version for spec in build_registry()}
    return admin, Env(topic_id, versions)


async def run_matrix(target: Target, cases: list[Case] = CASES) -> dict[str, Row]:
    """Every case on `target`: denied, granted, allowed, revoked."""
    admin, env = await _setup(target)
    from kcli.broker.apis import build_controller_registry

    controller_versions = {spec.api_key: spec.max_version for spec in build_controller_registry()}
    rows: dict[str, Row] = {}
    try:
        for case in cases:
            case_env = Env(
                env.topic_id, controller_versions if case.controller else env.versions, target.mechanism
            )
            if case.controller:
                principal, host = "User:ANONYMOUS", CONTROLLER_PEER
            else:
                principal, host = f"User:{ALICE}", "*"
            settle = target.settle if case.controller or not target.settle_controller_cases_only else 0.0
            await _acl_change(admin, principal, host, case.granted, add=True, settle=settle)
            denied, _ = await _send(target, case, case_env, retry=False)
            await _acl_change(admin, principal, host, case.needs, add=True, settle=settle)
            allowed, operations = await _send(target, case, case_env, retry=True)
            await _acl_change(admin, principal, host, case.needs + case.granted, add=False, settle=settle)
            rows[case.name] = Row(denied, allowed, operations)
    finally:
        await admin.close()
    return rows


def check_rows(rows: dict[str, Row], cases: list[Case] = CASES) -> None:
    """Without the ACLs the exact error; with them no authorization error (an API that checks nothing
    the principal lacks answers the same both times)."""
    wrong = {}
    for case in cases:
        row = rows[case.name]
        expected = () if case.denied is None else (case.denied.name.upper(),)
        if case.denied is None:
            ok = row.denied == row.allowed
        else:
            ok = row.denied == expected and not {n for n in row.allowed} & {
                e.name.upper() for e in AUTHORIZATION_ERRORS
            }
        if not ok:
            wrong[case.name] = (expected, row)
    assert not wrong, "\n".join(f"{name}: expected {exp}, got {row}" for name, (exp, row) in wrong.items())


# --- kcli ---------------------------------------------------------------------------------------------


def kcli_properties(workdir: Path) -> tuple[Path, int]:
    controller_port = free_port_range(1)
    users = f'user_admin="admin-secret" user_{ALICE}="{ALICE_PASSWORD}"'
    path = workdir / "server.properties"
    lines = [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        "controller.listener.names=CONTROLLER",
        f"listeners=SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller_port}",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={workdir / 'data'}",
        "sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        f'listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_MODULE} required username="admin" '
        f'password="admin-secret" {users};',
        *(f"{k}={v}" for k, v in AUTHORIZER_PROPERTIES.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path, controller_port


def client_security(workdir: Path, text: str, name: str) -> Any:
    path = workdir / f"{name}.properties"
    path.write_text(text)
    return load_client_config(path).security


def plain(workdir: Path, user: str, password: str) -> Any:
    return client_security(
        workdir,
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={PLAIN_MODULE} required "
        f'username="{user}" password="{password}";\n',
        user,
    )


@pytest.fixture(scope="module")
def kcli_rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Row]]:
    import subprocess

    workdir = tmp_path_factory.mktemp("matrix-kcli")
    config, controller_port = kcli_properties(workdir)
    env = kcli_env()
    cluster_id = subprocess.run(
        [*KCLI, "storage", "random-uuid"], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    subprocess.run(
        [*KCLI, "storage", "format", "-c", str(config), "-t", cluster_id],
        capture_output=True,
        env=env,
        check=True,
    )
    process: BrokerProcess = start_with_config(workdir, config)
    try:
        target = Target(
            process.bootstrap,
            f"127.0.0.1:{controller_port}",
            plain(workdir, "admin", "admin-secret"),
            plain(workdir, ALICE, ALICE_PASSWORD),
            "PLAIN",
        )
        yield asyncio.run(run_matrix(target))
        assert process.is_running(), process.log()[-3000:]
    finally:
        if process.is_running():
            stop_cleanly(process)


def test_every_served_api_has_a_row() -> None:
    """The matrix covers each API key either listener serves, SASL and ApiVersions included."""
    from kcli.broker.apis import build_controller_registry, build_registry

    broker_keys = {spec.api_key for spec in build_registry()}
    controller_only = {spec.api_key for spec in build_controller_registry()} - broker_keys
    rows = {case.api_key for case in CASES if not case.controller}
    controller_rows = {case.api_key for case in CASES if case.controller}
    assert broker_keys - rows == set()
    assert controller_only - controller_rows == set()


def test_kcli_authorization_matrix(kcli_rows: dict[str, Row]) -> None:
    check_rows(kcli_rows)


# --- Apache Kafka 4.1 ---------------------------------------------------------------------------------

KNOWN_DIFFERENCES: dict[str, str] = {}
"""Rows where kcli answers other than Kafka, each with the reason (docs/apache-kafka.md says the same)."""


def add_alice_scram(bootstrap: str, admin_properties: Path) -> None:
    """alice's SCRAM-SHA-512 credential, through `kcli configs alter` as admin."""
    import subprocess

    subprocess.run(
        [*KCLI, "configs", "alter", "--bootstrap-server", bootstrap, "--command-config", str(admin_properties),
         "--entity-type", "users", "--entity-name", ALICE, "--add-config",
         f"SCRAM-SHA-512=[password={ALICE_PASSWORD}]"],
        capture_output=True, env=kcli_env(), check=True, timeout=60,
    )  # fmt: skip


@pytest.fixture(scope="module")
def kafka_authorizer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Apache Kafka node on SASL_SSL with the StandardAuthorizer and the matrix's properties."""
    yield from _kafka_cluster(tmp_path_factory, 1, security="sasl_ssl", properties=AUTHORIZER_PROPERTIES)


@pytest.fixture(scope="module")
def kafka_rows(kafka_authorizer: Any) -> dict[str, Row]:

    import apache_kafka

    cluster = kafka_authorizer
    assert cluster.client_properties is not None
    workdir = cluster.client_properties.parent
    admin_text = cluster.client_properties.read_text()
    admin = client_security(workdir, admin_text, "matrix-admin")
    alice_text = admin_text.replace(
        f'username="{apache_kafka.ADMIN_USER}" password="{apache_kafka.ADMIN_PASSWORD}"',
        f'username="{ALICE}" password="{ALICE_PASSWORD}"',
    )
    alice = client_security(workdir, alice_text, "matrix-alice")
    add_alice_scram(cluster.bootstrap, cluster.client_properties)
    node = cluster.nodes[0]
    target = Target(
        cluster.bootstrap,
        f"127.0.0.1:{node.controller_port}",
        admin,
        alice,
        "SCRAM-SHA-512",
        settle=0.3,
        settle_controller_cases_only=True,
    )
    return _with_login_retry(target)


def _with_login_retry(target: Target, cases: list[Case] = CASES) -> dict[str, Row]:
    """The matrix, once alice's new SCRAM credential has reached the broker's credential cache."""
    deadline = time.monotonic() + 30

    async def login() -> bool:
        try:
            client = await KafkaClient.connect(target.bootstrap, security=target.alice)
        except Exception:
            return False
        await client.close()
        return True

    while not asyncio.run(login()):
        assert time.monotonic() < deadline, "alice cannot log in to Apache Kafka"
        time.sleep(0.5)
    return asyncio.run(run_matrix(target, cases))


def test_kafka_authorization_matrix(kafka_rows: dict[str, Row]) -> None:
    """The same matrix holds for Apache Kafka (the reference the rows were written against)."""
    check_rows(kafka_rows)


ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
"""kafka-acls.sh's main class."""


def test_kcli_acls_manages_kafkas_acls_as_kafka_acls_does(kafka_authorizer: Any, kafka_rows: Any) -> None:
    """`kcli acls` against Apache Kafka with the same flags and the same properties file as kafka-acls.sh:
    the same lines for add and list, ACLs one tool wrote seen and removed by the other, and `acls check`
    deciding from Kafka's ACLs. After the matrix, whose ACLs stay listed beside these."""
    import subprocess

    import apache_kafka

    config = str(kafka_authorizer.client_properties)
    workdir = kafka_authorizer.client_properties.parent / "kafka-acls"
    connect = ["--bootstrap-server", kafka_authorizer.bootstrap, "--command-config", config]

    def ours(*args: str, code: int = 0) -> str:
        done = subprocess.run([*KCLI, "acls", *args, *connect], capture_output=True, text=True,
                              env=kcli_env(), timeout=60)  # fmt: skip
        assert done.returncode == code, (args, done.stdout, done.stderr)
        return done.stdout

    def kafkas(*args: str) -> str:
        done = apache_kafka.run_tool(ACL_COMMAND, [*connect, *args], workdir=workdir)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def lines(text: str) -> list[str]:  # each resource's entries come in the tool's own order
        return sorted(line.strip() for line in text.splitlines() if line.strip())

    reader = ("--allow-principal", "User:erin", "--operation", "Read", "--operation", "Describe",
              "--topic", "erin-", "--resource-pattern-type", "prefixed")  # fmt: skip
    producer = ("--allow-principal", "User:erin", "--producer", "--topic", "erin-out")
    denied = ("--deny-principal", "User:erin", "--deny-host", "127.0.0.9", "--operation", "All",
              "--group", "erin-group")  # fmt: skip
    added = ours("add", *reader)
    assert "ResourcePattern(resourceType=TOPIC, name=erin-, patternType=PREFIXED)" in added, added
    assert lines(added) == lines(kafkas("--add", *reader))  # adding an existing ACL again is no change
    kafkas("--add", *producer)
    ours("add", *denied)
    listed = kafkas("--list")
    assert "(principal=User:erin, host=127.0.0.9, operation=ALL, permissionType=DENY)" in listed, listed
    assert lines(ours("list")) == lines(listed)
    assert set(lines(ours("list", "--topic", "erin-out"))) < set(lines(listed))

    assert "User:erin ALLOWED READ on TOPIC erin-events" in ours(
        "check", "--principal", "User:erin", "--operation", "Read", "--topic", "erin-events"
    )
    assert "DENIED" in ours(
        "check", "--principal", "User:erin", "--operation", "Write", "--topic", "erin-events", code=1
    )

    ours("remove", "--force", *reader)
    ours("remove", "--force", *producer)  # kafka-acls.sh wrote these
    kafkas("--remove", "--force", "--group", "erin-group")  # kcli wrote it; no principal: every ACL there
    assert "User:erin" not in ours("list")


def test_kcli_answers_as_kafka(kcli_rows: dict[str, Row], kafka_rows: dict[str, Row]) -> None:
    different = {
        name: (kcli_rows[name], kafka_rows[name])
        for name in kcli_rows
        if kcli_rows[name] != kafka_rows[name] and name not in KNOWN_DIFFERENCES
    }
    assert not different, "\n".join(f"{n}: kcli {k}, Kafka {a}" for n, (k, a) in different.items())


# --- forwarded: a three-node kcli cluster ------------------------------------------------------------

FORWARDED_CASES = [case for case in CASES if not case.controller and case.api_key in FORWARDABLE]
"""The admin rows a broker forwards to the active controller (KIP-590), which authorizes the caller."""


@pytest.fixture(scope="module")
def forwarded_rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Row]]:
    """The forwarded rows, sent to a node whose controller is not the active one, in a three-node
    SASL_SSL cluster (`kcli cluster start --security sasl_ssl`) with the same authorizer settings."""
    import re

    from secure_clients import start_secured_cluster, stop_secured_cluster

    overrides = [f"{k}={v}" for k, v in AUTHORIZER_PROPERTIES.items()]
    cluster = start_secured_cluster(tmp_path_factory.mktemp("matrix-forwarded"), "sasl_ssl", 3, *overrides)
    try:
        admin_text = cluster.client_properties.read_text()
        workdir = cluster.client_properties.parent
        alice_text = re.sub(
            r'username="[^"]*" password="[^"]*"',
            f'username="{ALICE}" password="{ALICE_PASSWORD}"',
            admin_text,
        )
        admin = client_security(workdir, admin_text, "m-admin")
        alice = client_security(workdir, alice_text, "m-alice")
        add_alice_scram(cluster.bootstrap, cluster.client_properties)

        async def leader() -> int:
            async with await KafkaClient.connect(cluster.bootstrap.split(",")[0], security=admin) as client:
                answer = await client.send(_describe_quorum(client.version(55), Env(uuid.UUID(int=0), {})))
                return answer.topics[0].partitions[0].leader_id

        active = asyncio.run(leader())
        addresses = cluster.bootstrap.split(",")
        standby = next(a for node, a in enumerate(addresses, start=1) if node != active)
        target = Target(standby, "", admin, alice, "SCRAM-SHA-512", settle=0.3)
        rows = _with_login_retry(target, FORWARDED_CASES)
        logs = cluster.logs()
        assert "for principal User:alice" in logs  # the active controller ran them as alice's
        assert "Traceback" not in logs
        yield rows
    finally:
        status = stop_secured_cluster(cluster)
    assert status == 0, cluster.output()


def test_forwarded_requests_are_authorized_as_their_caller(forwarded_rows: dict[str, Row]) -> None:
    """Through a broker that forwards them, alice's admin requests get the same answers: the active
    controller authorizes her (the Envelope's principal), not the forwarding broker."""
    check_rows(forwarded_rows, FORWARDED_CASES)
    assert len(forwarded_rows) >= 15
