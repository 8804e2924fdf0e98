"""The broker's request handlers, one module per API family, each contributing its `APIS` list.

`build_registry()` collects them into the `ApiRegistry` (kcli.broker.apis.registry) the server
dispatches with and ApiVersions advertises from.
"""

from __future__ import annotations

from kcli.broker.apis.registry import ApiRegistry


def build_controller_registry() -> ApiRegistry:
    """What the controller listener serves: Raft, broker lifecycle, and the admin requests brokers forward."""
    from kcli.broker.apis import (
        acls,
        api_versions,
        client_quotas,
        cluster,
        configs,
        elections,
        envelope,
        features,
        quorum,
        reassignments,
        sasl,
        scram,
        topics,
    )

    return ApiRegistry(
        [
            *api_versions.APIS,
            *sasl.APIS,  # a SASL controller listener's logins (Kafka's listeners: broker, controller)
            *quorum.CONTROLLER_APIS,
            *envelope.CONTROLLER_APIS,
            *topics.APIS,
            *elections.APIS,
            *reassignments.APIS,
            *configs.APIS,
            *cluster.APIS,
            *features.APIS,
            *scram.CONTROLLER_APIS,
            *client_quotas.CONTROLLER_APIS,
            *acls.CONTROLLER_APIS,
        ]
    )


def build_registry() -> ApiRegistry:
    """The broker's registry: every API family module's `APIS`."""
    from kcli.broker.apis import (
        acls,
        api_versions,
        client_quotas,
        cluster,
        configs,
        consumer_groups,
        describe_topic_partitions,
        elections,
        features,
        fetch,
        groups,
        list_offsets,
        log_dirs,
        metadata,
        offset_for_leader_epoch,
        offsets,
        produce,
        producer_id,
        producers,
        quorum,
        reassignments,
        records,
        sasl,
        scram,
        topics,
        transactions,
    )

    return ApiRegistry(
        [
            *api_versions.APIS,
            *metadata.APIS,
            *describe_topic_partitions.APIS,
            *cluster.APIS,
            *topics.APIS,
            *elections.APIS,
            *reassignments.APIS,
            *configs.APIS,
            *records.APIS,
            *log_dirs.APIS,
            *produce.APIS,
            *producer_id.APIS,
            *fetch.APIS,
            *list_offsets.APIS,
            *offset_for_leader_epoch.APIS,
            *groups.APIS,
            *consumer_groups.APIS,
            *offsets.APIS,
            *transactions.APIS,
            *producers.APIS,
            *quorum.BROKER_APIS,
            *features.APIS,
            *sasl.APIS,
            *scram.APIS,
            *client_quotas.APIS,
            *acls.APIS,
        ]
    )
