"""KafkaClient.produce against a real broker: pipelined batches at every Produce version, error answers
(read by hand or by kio), and requests in flight when the connection goes."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess
from kio.schema.errors import ErrorCode

from formats.records import RecordSpec, build_batch
from kcli.client import ClientError, KafkaClient
from kcli.protocol.messages import request_type
from kcli.protocol.produce_codec import ProducePartitionAnswer

pytestmark = pytest.mark.timeout(60)

NOW_MS = int(time.time() * 1000)


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def batch(count: int) -> bytes:
    return build_batch([RecordSpec(NOW_MS, b"k%d" % i, b"v" * 100) for i in range(count)])


async def produce_all(client: KafkaClient, framer, batches: list[tuple[int, bytes]]) -> list:
    """Pipeline every batch at once; the (answer, error) pairs in the order they were sent."""
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in batches]
    for future, (partition, records) in zip(futures, batches, strict=True):
        client.produce(framer, partition, records, lambda a, e, f=future: f.set_result((a, e)))
    return list(await asyncio.wait_for(asyncio.gather(*futures), 15))


async def topic_id_of(client: KafkaClient, name: str):
    cls = request_type(3, 12)
    topic = sys.modules[cls.__module__].MetadataRequestTopic(name=name, topic_id=None)
    response = await client.send(
        cls(topics=(topic,), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )
    return response.topics[0].topic_id


def test_pipelined_batches_at_every_version(broker: BrokerProcess) -> None:
    create_topic(broker, "versions", 2)

    async def run() -> None:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            topic_id = await topic_id_of(client, "versions")
            low, high = client.broker_versions[0]
            expected = {0: 0, 1: 0}
            for version in range(max(low, 3), min(high, 13) + 1):
                framer = client.produce_framer(
                    "versions",
                    acks=-1,
                    timeout_ms=5000,
                    topic_id=topic_id if version >= 13 else None,
                    highest=version,
                )
                assert framer.version == version
                counts = range(1, 7)
                sent = [(count % 2, batch(count)) for count in counts]
                answers = await produce_all(client, framer, sent)
                for (partition, _), count, (answer, error) in zip(sent, counts, answers, strict=True):
                    assert error is None
                    assert answer.index == partition and answer.error_code is ErrorCode.none
                    assert answer.base_offset == expected[partition]
                    assert answer.error_message is None
                    expected[partition] += count

    asyncio.run(run())


def test_error_answers(broker: BrokerProcess) -> None:
    create_topic(broker, "errors", 1)

    async def run() -> None:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            framer = client.produce_framer("errors", acks=-1, timeout_ms=5000)
            corrupt = bytearray(batch(3))
            corrupt[-1] ^= 0xFF  # the CRC no longer matches
            answers = await produce_all(client, framer, [(7, batch(1)), (0, bytes(corrupt)), (0, batch(2))])
            (missing, e1), (refused, e2), (fine, e3) = answers
            assert e1 is e2 is e3 is None
            assert missing.index == 7 and missing.error_code is ErrorCode.unknown_topic_or_partition
            assert refused.error_code is ErrorCode.corrupt_message
            assert fine == ProducePartitionAnswer(0, ErrorCode.none, 0, -1, 0, None)
            other = client.produce_framer("no-such-topic", acks=-1, timeout_ms=5000)
            [(answer, error)] = await produce_all(client, other, [(0, batch(1))])
            assert error is None and answer.error_code is ErrorCode.unknown_topic_or_partition

    asyncio.run(run())


def test_requests_in_flight_fail_when_the_connection_goes(broker: BrokerProcess) -> None:
    create_topic(broker, "gone", 1)

    async def run() -> None:
        client = await KafkaClient.connect(broker.bootstrap)
        framer = client.produce_framer("gone", acks=-1, timeout_ms=5000)
        results: list = []
        for _ in range(3):
            client.produce(framer, 0, batch(5), lambda a, e: results.append((a, e)))
        await client.close()
        assert len(results) == 3
        assert all(a is None and isinstance(e, ClientError) for a, e in results)
        with pytest.raises(ClientError, match="is closed"):
            client.produce(framer, 0, batch(1), lambda a, e: None)

    asyncio.run(run())
