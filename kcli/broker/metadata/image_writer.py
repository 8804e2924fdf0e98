"""The records that rebuild an image: what a metadata snapshot holds (Kafka's MetadataImage.write).

Replaying `image_records(image)` onto an empty image gives `image` back (its offset aside): feature
levels, broker registrations with their fencing, topics and their partitions as they stand now (leader,
epochs, ISR, ELR), configs, client quotas, the next producer id block, ACLs, and SCRAM credentials (when
metadata.version has them: 3.5-IV2 or later, as Kafka's ScramImage.write).
"""

from __future__ import annotations

from typing import Any

from kcli.broker.metadata.controller.controller_result import Record
from kcli.broker.metadata.image import ClusterMetadataImage, PartitionRegistration
from kcli.features import is_elr_supported, is_scram_supported, partition_record_version
from kcli.security.scram_credentials import credential_record

REGISTER_BROKER_RECORD_VERSION = 3


def image_records(image: ClusterMetadataImage) -> list[Record]:
    """Records in Kafka's snapshot order: features, cluster, topics, configs, client quotas, producer
    ids, ACLs, SCRAM."""
    records: list[Record] = [
        ("FeatureLevelRecord", 0, {"name": name, "featureLevel": level})
        for name, level in sorted(image.features.items())
    ]
    for broker_id, b in sorted(image.brokers_by_id.items()):
        records.append(
            (
                "RegisterBrokerRecord",
                REGISTER_BROKER_RECORD_VERSION,
                {
                    "brokerId": broker_id,
                    "incarnationId": b.incarnation_id,
                    "brokerEpoch": b.broker_epoch,
                    "endPoints": [
                        {
                            "name": e.name,
                            "host": e.host,
                            "port": e.port,
                            "securityProtocol": e.security_protocol,
                        }
                        for e in b.endpoints
                    ],
                    "features": [
                        {"name": name, "minSupportedVersion": low, "maxSupportedVersion": high}
                        for name, (low, high) in sorted(b.features.items())
                    ],
                    "rack": b.rack,
                    "fenced": b.fenced,
                    "inControlledShutdown": b.in_controlled_shutdown,
                    "logDirs": list(b.log_dirs),
                },
            )
        )
    for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        records.append(("TopicRecord", 0, {"name": topic.name, "topicId": topic.topic_id}))
        for index, partition in sorted(topic.partitions.items()):
            records.append(_partition_record(topic.topic_id, index, partition, image.metadata_version))
    for (resource_type, resource_name), values in sorted(image.configs.items()):
        for name, value in sorted(values.items()):
            records.append(
                (
                    "ConfigRecord",
                    0,
                    {
                        "resourceType": resource_type,
                        "resourceName": resource_name,
                        "name": name,
                        "value": value,
                    },
                )
            )
    for entity, values in sorted(image.client_quotas.items(), key=lambda item: repr(item[0])):
        entity_data = [{"entityType": kind, "entityName": name} for kind, name in entity]
        records.extend(
            ("ClientQuotaRecord", 0, {"entity": entity_data, "key": key, "value": value, "remove": False})
            for key, value in sorted(values.items())
        )
    if image.producer_ids is not None:
        block = image.producer_ids
        records.append(
            (
                "ProducerIdsRecord",
                0,
                {
                    "brokerId": block.assigned_broker_id,
                    "brokerEpoch": -1,
                    "nextProducerId": block.first_producer_id,
                },
            )
        )
    records.extend(
        ("AccessControlEntryRecord", 0, acl.to_record(acl_id)) for acl_id, acl in sorted(image.acls.items())
    )
    if is_scram_supported(image.metadata_version):
        for _, users in sorted(image.scram.items()):
            records.extend(credential_record(user, credential) for user, credential in sorted(users.items()))
    return records


def _partition_record(topic_id: Any, index: int, p: PartitionRegistration, metadata_version: int) -> Record:
    """PartitionRegistration.toRecord: the version metadata.version writes; from 4.0-IV1 on the ELR and
    the last known ELR, each only when it has members (tagged fields, left out when empty)."""
    data: dict[str, Any] = {
        "partitionId": index,
        "topicId": topic_id,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "removingReplicas": list(p.removing_replicas),
        "addingReplicas": list(p.adding_replicas),
        "leader": p.leader,
        "leaderRecoveryState": p.leader_recovery_state,
        "leaderEpoch": p.leader_epoch,
        "partitionEpoch": p.partition_epoch,
        "directories": list(p.directories),
    }
    if is_elr_supported(metadata_version):
        version = partition_record_version(metadata_version)
        if p.elr:
            data["eligibleLeaderReplicas"] = list(p.elr)
        if p.last_known_elr:
            data["lastKnownElr"] = list(p.last_known_elr)
    elif p.elr or p.last_known_elr:  # an image folded from a log that carried them: keep them
        version = 2
        data["eligibleLeaderReplicas"] = list(p.elr)
        data["lastKnownElr"] = list(p.last_known_elr)
    else:
        version = 1  # with the directories: kcli's images are of 3.7-IV2 or later
    return ("PartitionRecord", version, data)
