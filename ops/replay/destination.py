"""The destination of a replay: the topic's partitions and leaders, the topic created first when it is
missing (with CreateTopics, never by Metadata auto-creation), and its log end offsets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from kcli.cluster import Cluster, ClusterMetadata
from ops.replay.options import ReplayError, ReplayOptions
from ops.replay.partitioner import Mapping
from ops.replay.sender import RETRY_BACKOFF_S
from ops.replay.sources import SourcePartition, check_framing

LATEST = -1


async def open_destination(
    cluster: Cluster, options: ReplayOptions, sources: list[SourcePartition], warn: Callable[[str], object]
) -> tuple[ClusterMetadata | None, int]:
    """The destination's metadata and number of partitions, once it can take `sources`: created when
    missing, and with a partition for each source partition under --partitioner same. The metadata is None
    for a dry run into a topic it would create."""
    topic = options.topic
    metadata = await cluster.metadata([topic])
    partitions = metadata.partitions(topic)
    if metadata.errors.get(topic) == ErrorCode.unknown_topic_or_partition:
        metadata = await _create(cluster, options, sources, warn)
        partitions = metadata.partitions(topic) if metadata else list(range(wanted_partitions(sources)))
    elif topic in metadata.errors or not partitions:
        error = metadata.errors.get(topic, ErrorCode.unknown_topic_or_partition)
        raise ReplayError(
            f"cannot replay into topic {topic!r} on {options.bootstrap_servers}: {error.name.upper()}."
        )
    num_partitions = len(partitions)
    if options.mapping is Mapping.SAME:
        beyond = [s.name for s in sources if s.partition >= num_partitions]
        if beyond:
            raise ReplayError(
                f"topic {topic!r} has {num_partitions} partition(s), too few for source "
                f"partition {beyond[0]} with --partitioner same."
            )
    return metadata, num_partitions


def wanted_partitions(sources: list[SourcePartition]) -> int:
    """Partitions of a created destination: the highest source partition + 1, which `same` needs and which,
    for `key`, hashes keys as the source topic did (a log dir may hold only some of its partitions)."""
    return max(s.partition for s in sources) + 1


async def log_end_offsets(cluster: Cluster, topic: str, num_partitions: int) -> list[int]:
    """The destination's log end offset of each partition."""
    from ops.groups import list_offsets

    ends = await list_offsets(cluster, [(topic, p) for p in range(num_partitions)], LATEST)
    missing = [p for p in range(num_partitions) if (topic, p) not in ends]
    if missing:
        raise ReplayError(f"cannot read the log end offset of {topic}-{missing[0]} on the destination.")
    return [ends[(topic, p)] for p in range(num_partitions)]


async def _create(
    cluster: Cluster, options: ReplayOptions, sources: list[SourcePartition], warn: Callable[[str], object]
) -> ClusterMetadata | None:
    """Create the missing destination and wait for its leaders; None for a dry run, which only says what
    it would create."""
    wanted = wanted_partitions(sources)
    if not options.create_topic:
        raise ReplayError(
            f"topic {options.topic!r} does not exist on {options.bootstrap_servers} and --no-create-topic "
            f"was given: create it with at least {wanted} partition(s)."
        )
    factor = "the broker's default" if options.replication_factor < 0 else str(options.replication_factor)
    plural = "" if wanted == 1 else "s"
    if options.dry_run:
        warn(
            f"topic {options.topic} does not exist: the replay would create it with {wanted} partition{plural}, "
            f"replication factor {factor}."
        )
        return None
    from ops.topics import create_topic

    if not options.skip_corrupt:
        check_framing(sources)  # a corrupt source fails before the topic exists, not after
    created = await create_topic(
        cluster,
        options.topic,
        partitions=wanted,
        replication_factor=None if options.replication_factor < 0 else options.replication_factor,
        configs=dict(options.topic_configs),
        if_not_exists=True,  # created meanwhile by someone else: use it as it is
    )
    if created.created:
        if created.replication_factor >= 0:
            factor = str(created.replication_factor)
        warn(f"created topic {options.topic} with {wanted} partition{plural}, replication factor {factor}.")
    return await _wait_for_leaders(cluster, options)


async def _wait_for_leaders(cluster: Cluster, options: ReplayOptions) -> ClusterMetadata:
    """The destination's metadata once every partition has a leader (a new topic may need a moment)."""
    topic = options.topic
    deadline = time.monotonic() + options.request_timeout
    while True:
        metadata = await cluster.metadata([topic])
        partitions = metadata.partitions(topic)
        if partitions and all(metadata.leaders[(topic, p)] >= 0 for p in partitions):
            return metadata
        if time.monotonic() > deadline:
            raise ReplayError(f"topic {topic!r} was created but its partitions have no leader yet.")
        await asyncio.sleep(RETRY_BACKOFF_S)
