"""The clients that run throughout the faults, each in a thread of its own, recording into a `History`.

- `IdempotentProducer`: acks=all, enable.idempotence, one unique value per send to a chosen partition;
  for every send its outcome and the highest offset known below the high watermark when it started.
- `TransactionalProducer`: small transactions over the partitions of the transactional topic, committed
  or aborted at random (seeded), each recorded with how it ended.
- `Reader`: a consumer (read_uncommitted or read_committed) assigned every partition of both topics from
  the beginning, recording what it sees.
- `final_read`: after the faults, every partition read from offset 0 to its end.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from faults.history import History, Outcome, Seen, Transaction, TxnOutcome, Write

# librdkafka reports every dropped connection; a run drops hundreds on purpose.
LOG = logging.getLogger("faults.librdkafka")
LOG.setLevel(logging.CRITICAL)

MESSAGE_TIMEOUT_MS = 60000
"""Above what a fault can hold a write up (an ISR shrink takes replica.lag.time.max.ms): a message that
times out makes librdkafka bump the producer epoch and send again, under new sequence numbers, what
was in flight, which no broker can tell from new records (idempotence covers retries, not that)."""
REQUEST_TIMEOUT_MS = 30000  # Kafka's: a produce waits that long for the ISR before REQUEST_TIMED_OUT
TRANSACTIONAL_ID = "faults-txn"
MAX_IN_FLIGHT = 200
TIMED_OUT = {KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}


class Known:
    """The highest offset per partition of the data topic known to be below the high watermark:
    acknowledged by the producer or seen by a consumer. Shared between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[int, int] = {}

    def saw(self, partition: int, offset: int) -> None:
        with self._lock:
            if offset > self._offsets.get(partition, -1):
                self._offsets[partition] = offset

    def get(self, partition: int) -> int:
        with self._lock:
            return self._offsets.get(partition, -1)


class Worker(threading.Thread):
    """A thread that runs until `stop()`; `progress` counts its successes; an exception is kept."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.progress = 0
        self.error: BaseException | None = None
        self.notes: list[str] = []

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # reported by the run as a harness failure
            self.error = exc

    def work(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        self.join(timeout)


class IdempotentProducer(Worker):
    def __init__(
        self, bootstrap: str, history: History, known: Known, partitions: int, rate: float, rng: random.Random
    ) -> None:
        super().__init__("faults-producer")
        self.bootstrap = bootstrap
        self.history = history
        self.known = known
        self.partitions = partitions
        self.interval = 1.0 / rate
        self.rng = rng
        self.fatal = threading.Event()
        self.instances = 0

    def _producer(self) -> Producer:
        self.instances += 1
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "client.id": f"faults-producer-{self.instances}",
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
                "request.timeout.ms": REQUEST_TIMEOUT_MS,
                "reconnect.backoff.max.ms": 1000,
                "error_cb": self._on_error,
                "logger": LOG,
            }
        )

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.notes.append(f"fatal producer error: {error}")
            self.fatal.set()

    def work(self) -> None:
        producer = self._producer()
        sequence = 0
        in_flight = [0]
        next_send = time.monotonic()
        while not self.stopping.is_set():
            if self.fatal.is_set():  # an idempotent producer that lost its sequence state: start again
                producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 5)
                self.fatal.clear()
                producer = self._producer()
            now = time.monotonic()
            if now >= next_send and in_flight[0] < MAX_IN_FLIGHT:
                partition = sequence % self.partitions
                write = Write(f"v{sequence}", partition, self.known.get(partition))
                self.history.writes.append(write)
                try:
                    producer.produce(
                        self.history.topic,
                        write.value.encode(),
                        partition=partition,
                        on_delivery=self._answer(write, in_flight),
                    )
                    in_flight[0] += 1
                except (BufferError, KafkaException) as exc:
                    write.outcome, write.error = Outcome.FAILED, f"not sent: {exc}"
                sequence += 1
                next_send = max(next_send + self.interval, now - 1.0)
            if in_flight[0] >= MAX_IN_FLIGHT:  # wait for an answer (poll returns at the first), do not spin
                producer.poll(0.05)
            else:
                producer.poll(min(max(next_send - time.monotonic(), 0.0), 0.05))
        producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 5)  # what is still pending after it stays PENDING

    def _answer(self, write: Write, in_flight: list[int]):  # noqa: ANN202 - librdkafka's callback shape
        def on_delivery(error: KafkaError | None, message: object) -> None:
            in_flight[0] -= 1
            if error is None:
                # No offset: librdkafka acknowledged it implicitly (an earlier request whose answer was
                # lost was in fact written, as a later one's success showed); where is for the checker.
                write.outcome, write.offset = Outcome.ACKED, message.offset()  # type: ignore[attr-defined]
                if write.offset is not None:
                    self.known.saw(write.partition, write.offset)
                self.progress += 1
            else:
                write.outcome = Outcome.UNKNOWN if error.code() in TIMED_OUT else Outcome.FAILED
                write.error = str(error)

        return on_delivery


class TransactionalProducer(Worker):
    """One transaction at a time: 1-4 records over the transactional topic's partitions, then commit
    (3 in 4) or abort. A commit or abort that does not answer leaves the transaction UNKNOWN."""

    OPERATION_TIMEOUT_S = 20.0

    def __init__(self, bootstrap: str, history: History, partitions: int, rng: random.Random) -> None:
        super().__init__("faults-transactions")
        self.bootstrap = bootstrap
        self.history = history
        self.partitions = partitions
        self.rng = rng
        self.instances = 0

    def _producer(self) -> Producer | None:
        """A producer whose init_transactions answered (it aborts what a previous one left open)."""
        self.instances += 1
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "client.id": f"faults-txn-{self.instances}",
                "transactional.id": TRANSACTIONAL_ID,
                "transaction.timeout.ms": 30000,
                "message.timeout.ms": 12000,
                "request.timeout.ms": REQUEST_TIMEOUT_MS,
                "linger.ms": 5,
                "reconnect.backoff.max.ms": 1000,
                "logger": LOG,
            }
        )
        try:
            producer.init_transactions(self.OPERATION_TIMEOUT_S)
            return producer
        except KafkaException as exc:
            self.notes.append(f"init_transactions: {exc}")
            return None

    def work(self) -> None:
        producer: Producer | None = None
        txn_id = 0
        while not self.stopping.is_set():
            if producer is None:
                producer = self._producer()
                if producer is None:
                    self.stopping.wait(1.0)
                    continue
            txn = Transaction(txn_id)
            txn_id += 1
            self.history.transactions.append(txn)
            commit = self.rng.random() < 0.75
            try:
                producer.begin_transaction()
                for i in range(self.rng.randint(1, 4)):
                    partition = self.rng.randrange(self.partitions)
                    value = f"t{txn.txn_id}-{i}"
                    txn.records.append((partition, value))
                    producer.produce(self.history.txn_topic, value.encode(), partition=partition)
            except (BufferError, KafkaException) as exc:
                txn.error = f"produce: {exc}"
                commit = False
            producer = self._finish(producer, txn, commit)
            self.stopping.wait(0.2)

    def _finish(self, producer: Producer, txn: Transaction, commit: bool) -> Producer | None:
        """Commit or abort; a retriable error retries the same call (as librdkafka asks), an error that
        requires an abort aborts. A producer that cannot finish the transaction is dropped and the
        transaction stays UNKNOWN: all or none of it may be committed."""
        for _ in range(3):
            try:
                if commit:
                    producer.commit_transaction(self.OPERATION_TIMEOUT_S)
                    txn.outcome = TxnOutcome.COMMITTED
                else:
                    producer.abort_transaction(self.OPERATION_TIMEOUT_S)
                    txn.outcome = TxnOutcome.ABORTED
                self.progress += 1
                return producer
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                txn.error = f"{txn.error}; {'commit' if commit else 'abort'}: {exc}"
                if error is None or error.fatal():
                    return None
                if error.txn_requires_abort():
                    commit = False
                elif not error.retriable():
                    return None
        return None


class Reader(Worker):
    """A consumer of every partition of `topics` from the beginning (no group: assign)."""

    def __init__(
        self,
        bootstrap: str,
        history: History,
        name: str,
        isolation: str,
        topics: dict[str, int],
        known: Known,
    ) -> None:
        super().__init__(f"faults-{name}")
        self.bootstrap = bootstrap
        self.history = history
        self.seen: list[Seen] = history.consumed.setdefault(name, [])
        if isolation == "read_committed":
            history.read_committed.add(name)
        self.isolation = isolation
        self.topics = topics
        self.known = known

    def work(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "client.id": self.name,
                "group.id": self.name,  # assign() only: no group membership, no commits
                "enable.auto.commit": False,
                "isolation.level": self.isolation,
                "auto.offset.reset": "error",  # a position out of range is a finding, not a reset
                "fetch.wait.max.ms": 200,
                "reconnect.backoff.max.ms": 1000,
                "logger": LOG,
            }
        )
        consumer.assign(
            [TopicPartition(t, p, OFFSET_BEGINNING) for t, count in self.topics.items() for p in range(count)]
        )
        try:
            while not self.stopping.is_set():
                for message in consumer.consume(200, 0.2):
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            self.notes.append(f"{message.topic()}-{message.partition()}: {error}")
                        continue
                    seen = Seen(
                        message.topic(), message.partition(), message.offset(), message.value().decode()
                    )
                    self.seen.append(seen)
                    if seen.topic == self.history.topic:
                        self.known.saw(seen.partition, seen.offset)
                    self.progress += 1
        finally:
            consumer.close()


def final_read(
    bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 60.0
) -> tuple[dict[int, list[tuple[int, str]]], dict[int, int]]:
    """Every record of every partition of `topic`, from offset 0 to the high watermark each had when
    the read began: ({partition: [(offset, value)]}, {partition: high watermark})."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": f"faults-final-{isolation}",
            "group.id": f"faults-final-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "logger": LOG,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10.0)[1] for p in range(partitions)
        }
        records: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                partition = message.partition()
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and message.offset() >= ends[partition]:
                        done.add(partition)
                    continue
                if message.offset() < ends[partition]:
                    records[partition].append((message.offset(), message.value().decode()))
                if message.offset() + 1 >= ends[partition]:
                    done.add(partition)
        return records, ends
    finally:
        consumer.close()


def stop_all(workers: Sequence[Worker], timeout: float) -> list[str]:
    """Stop the workers (bounded); the sentences of those that failed or would not stop."""
    for worker in workers:
        worker.stopping.set()
    problems = []
    deadline = time.monotonic() + timeout
    for worker in workers:
        worker.join(max(deadline - time.monotonic(), 0.1))
        if worker.is_alive():
            problems.append(f"{worker.name} did not stop within {timeout:g} s")
        elif worker.error is not None:
            problems.append(f"{worker.name} failed: {worker.error!r}")
    return problems
