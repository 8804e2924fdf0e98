"""One consumer-group member in its own process, for tests that must kill a member outright.

    python tests/group_member.py CLIENT BOOTSTRAP GROUP TOPIC [--session-ms N] [--heartbeat-ms N]
        [--poll-ms N] [--instance-id ID] [--protocol classic|consumer] [--commit-ms N] [--record-ms X]

CLIENT is confluent, kafka-python or aiokafka. The member subscribes to TOPIC, commits synchronously
after every record, polls with a timer of --poll-ms (100), and reports on stdout as JSON lines: {"assigned": [partitions]} when its
assignment changes and {"consumed": [partition, offset]} once a record's commit succeeded. A line
"stop" on stdin closes the consumer cleanly (a LeaveGroup for dynamic members); SIGKILL does not.

With --commit-ms (confluent only) the member commits in batches instead: it reports {"read": [partition,
offset]} as each record is returned, spends --record-ms on it, and commits what it read synchronously
every --commit-ms, when partitions are revoked (before the revocation is acknowledged) and before a
"stop" closes it. It reports {"committing": [[partition, next offset], ...]} before each commit,
{"committed": [...]} once it succeeded, {"commit_failed": error} when it did not, {"lost": [partitions]}
when partitions were lost (a fenced member: no commit) and {"member": id} once it has a member id.

The client's own logging goes to stderr, its group coordinator at DEBUG (JoinGroup, SyncGroup, heartbeat
and their errors), so a test that times out can show what the member saw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import threading

COORDINATOR_LOGGERS = ("kafka.coordinator", "aiokafka.consumer.group_coordinator")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=["confluent", "kafka-python", "aiokafka"])
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--poll-ms", type=int, default=100)
    parser.add_argument("--instance-id")
    parser.add_argument(
        "--protocol", choices=["classic", "consumer"], default="classic", help="confluent only (KIP-848)"
    )
    parser.add_argument("--commit-ms", type=int, help="confluent only: commit in batches, this often")
    parser.add_argument(
        "--record-ms", type=float, default=0.0, help="with --commit-ms: time spent per record"
    )
    args = parser.parse_args()
    _configure_logging()
    stop = threading.Event()
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    if args.client == "confluent" and args.commit_ms is not None:
        _confluent_batched(args, stop)
    elif args.client == "confluent":
        _confluent(args, stop)
    elif args.client == "kafka-python":
        _kafka_python(args, stop)
    else:
        asyncio.run(_aiokafka(args, stop))


def _configure_logging() -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s %(threadName)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for name in COORDINATOR_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    # kafka-python logs its "need rejoin?" answer and a coordinator-lookup timeout on every poll: keep
    # only the answers that start a rejoin (a metadata or subscription change) and the join timeouts.
    logging.getLogger("kafka.coordinator.consumer").addFilter(_not_every_poll)


def _not_every_poll(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (
        "(from base.rejoin_needed;" in message
        or message.startswith("need_rejoin: False")
        or message.startswith("coordinator.poll: timeout in ensure_coordinator_ready")
    )


def _watch_stdin(stop: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stop.set()


def _report(**event: object) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class _Assignment:
    def __init__(self) -> None:
        self.last: list[int] | None = None

    def update(self, partitions: list[int]) -> None:
        partitions = sorted(partitions)
        if partitions != self.last:
            self.last = partitions
            _report(assigned=partitions)


def _confluent_config(args: argparse.Namespace) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if args.protocol == "consumer":  # the session and heartbeat interval are the broker's then
        config["group.protocol"] = "consumer"
    else:
        config |= {"session.timeout.ms": args.session_ms, "heartbeat.interval.ms": args.heartbeat_ms}
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    return config


def _confluent(args: argparse.Namespace, stop: threading.Event) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(_confluent_config(args))
    consumer.subscribe([args.topic])
    assignment = _Assignment()
    while not stop.is_set():
        message = consumer.poll(args.poll_ms / 1000)
        assignment.update([tp.partition for tp in consumer.assignment()])
        if message is None or message.error():
            continue
        consumer.commit(message=message, asynchronous=False)
        _report(consumed=[message.partition(), message.offset()])
    consumer.close()


def _confluent_batched(args: argparse.Namespace, stop: threading.Event) -> None:
    """Commits every --commit-ms, on revocation and before closing; see the module's docstring."""
    import time

    from confluent_kafka import Consumer, KafkaException, TopicPartition

    pending: dict[int, int] = {}  # partition -> next offset, read but not yet committed

    def commit(consumer: Consumer, partitions: list[int]) -> None:
        offsets = [TopicPartition(args.topic, p, pending[p]) for p in partitions if p in pending]
        if not offsets:
            return
        _report(committing=[[tp.partition, tp.offset] for tp in offsets])
        try:
            done = consumer.commit(offsets=offsets, asynchronous=False) or []
        except KafkaException as e:
            _report(commit_failed=str(e.args[0]))
            return
        failed = [tp for tp in done if tp.error is not None]
        if failed:
            _report(commit_failed=[[tp.partition, str(tp.error)] for tp in failed])
        ok = [tp for tp in done if tp.error is None]
        for tp in ok:
            if pending.get(tp.partition) == tp.offset:
                del pending[tp.partition]
        _report(committed=[[tp.partition, tp.offset] for tp in ok])

    def revoked(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        commit(consumer, [tp.partition for tp in partitions])

    def lost(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            pending.pop(tp.partition, None)
        _report(lost=sorted(tp.partition for tp in partitions))

    consumer = Consumer(_confluent_config(args))
    consumer.subscribe([args.topic], on_revoke=revoked, on_lost=lost)
    assignment = _Assignment()
    member_id = None
    last_commit = time.monotonic()
    while not stop.is_set():
        message = consumer.poll(args.poll_ms / 1000)
        assignment.update([tp.partition for tp in consumer.assignment()])
        if member_id is None and consumer.memberid():
            member_id = consumer.memberid()
            _report(member=member_id)
        if message is not None and message.error() is None:
            _report(read=[message.partition(), message.offset()])
            if args.record_ms:
                time.sleep(args.record_ms / 1000)
            pending[message.partition()] = message.offset() + 1
        if pending and time.monotonic() - last_commit >= args.commit_ms / 1000:
            commit(consumer, list(pending))
            last_commit = time.monotonic()
    commit(consumer, list(pending))
    consumer.close()


def _kafka_python(args: argparse.Namespace, stop: threading.Event) -> None:
    from kafka import KafkaConsumer
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        group_instance_id=args.instance_id,
    )
    # Learn the topic's partitions before the first JoinGroup. kafka-python 3.0 fetches a subscribed
    # topic's metadata lazily (at least retry_backoff_ms after bootstrap), so with no initial rebalance
    # delay its leader's first assignment would be empty, and the metadata that arrives next makes it
    # rejoin through need_rejoin()'s snapshot check alone. That rejoin is lost if the poll timer runs out
    # before SyncGroup answers: need_rejoin() is False once the leader's new assignment snapshot matches,
    # so no later poll collects the finished join; the member keeps its heartbeat off and never gets
    # its partitions (dpkp/kafka-python join_group_async; Java's consumer also waits on a pending join).
    consumer.partitions_for_topic(args.topic)
    assignment = _Assignment()
    while not stop.is_set():
        batches = consumer.poll(timeout_ms=args.poll_ms)
        assignment.update([tp.partition for tp in consumer.assignment()])
        for tp, records in batches.items():
            for record in records:
                consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "", -1)})
                _report(consumed=[tp.partition, record.offset])
    consumer.close()


async def _aiokafka(args: argparse.Namespace, stop: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import OffsetAndMetadata

    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        group_instance_id=args.instance_id,
    )
    await consumer.start()
    assignment = _Assignment()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=args.poll_ms)
            assignment.update([tp.partition for tp in consumer.assignment()])
            for tp, records in batches.items():
                for record in records:
                    await consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "")})
                    _report(consumed=[tp.partition, record.offset])
    finally:
        await consumer.stop()


if __name__ == "__main__":
    main()
