"""The metadata hash of a consumer group's subscribed topics (KIP-1101, Kafka 4.1).

Kafka 4.1 keeps, in the group's epoch record (ConsumerGroupMetadataValue's tagged MetadataHash), one
64-bit hash of every subscribed topic's id, name, partition count and the racks of each partition's
replicas, where Kafka 4.0 wrote the topics out (ConsumerGroupPartitionMetadataValue, record type 4). A
heartbeat that computes another hash bumps the group epoch, so a topic that grows or moves racks gets
the group a new assignment. The bytes hashed are hash4j's HashStream64 encoding as Kafka's
Utils.computeTopicHash and computeGroupHash feed it (little-endian ints and longs, a string as its
UTF-16 code units then their count), hashed with XXH3-64, so the value equals Kafka's for the same
metadata and a group moves between kcli and Kafka 4.1 without a rebalance.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence

import xxhash

from kcli.broker.metadata.image import ClusterMetadataImage

TOPIC_HASH_MAGIC_BYTE = b"\x00"
"""The version of the topic hash's layout (Utils.TOPIC_HASH_MAGIC_BYTE)."""

_INT = struct.Struct("<i")
_UUID = struct.Struct("<qq")


def _string(value: str) -> bytes:
    """hash4j's putString: the UTF-16 code units, then how many there are."""
    units = value.encode("utf-16-le")
    return units + _INT.pack(len(units) // 2)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def topic_hash(image: ClusterMetadataImage, name: str) -> int:
    """Utils.computeTopicHash: 0 for a topic the image does not hold."""
    topic = image.topic_image(name)
    if topic is None:
        return 0
    racks = []
    for index in range(len(topic.partitions)):
        brokers = (image.broker(replica) for replica in topic.partitions[index].replicas)
        racks.append([b.rack for b in brokers if b is not None and b.rack is not None])
    return topic_hash_of(topic.topic_id, topic.name, racks)


def topic_hash_of(topic_id: uuid.UUID, name: str, partition_racks: Sequence[Sequence[str]]) -> int:
    """The hash of a topic with these partitions, each with the racks of its replicas' brokers."""
    most, least = divmod(topic_id.int, 1 << 64)
    parts = [TOPIC_HASH_MAGIC_BYTE, _UUID.pack(_signed(most), _signed(least)), _string(name)]
    parts.append(_INT.pack(len(partition_racks)))
    for index, racks in enumerate(partition_racks):
        parts.append(_INT.pack(index))
        for rack in sorted(racks):  # String's natural order: UTF-16 code units, as Python's for the BMP
            parts.append(_INT.pack(len(rack.encode("utf-16-le")) // 2) + _string(rack))
    return _signed(xxhash.xxh3_64_intdigest(b"".join(parts)))


def group_hash(topic_hashes: Mapping[str, int]) -> int:
    """Utils.computeGroupHash: the topic hashes in topic-name order, hashed; 0 for no topic."""
    if not topic_hashes:
        return 0
    data = b"".join(struct.pack("<q", topic_hashes[name]) for name in sorted(topic_hashes))
    return _signed(xxhash.xxh3_64_intdigest(data))


class MetadataHasher:
    """Topic hashes remembered for one metadata image (Kafka's topicHashCache, which it clears on every
    metadata change): a heartbeat costs a hash of the group's few hashes, not of its topics."""

    def __init__(self) -> None:
        self._image: ClusterMetadataImage | None = None
        self._topics: dict[str, int] = {}

    def group_hash(self, image: ClusterMetadataImage, topic_names: Iterable[str]) -> int:
        """ModernGroup.computeMetadataHash of the subscribed `topic_names` in `image`."""
        if image is not self._image:
            self._image, self._topics = image, {}
        hashes = {}
        for name in topic_names:
            if image.topic_image(name) is None:
                continue  # a topic subscribed to before it exists counts only once it does
            found = self._topics.get(name)
            if found is None:
                found = self._topics[name] = topic_hash(image, name)
            hashes[name] = found
        return group_hash(hashes)
