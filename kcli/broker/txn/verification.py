"""Transaction verification for partition leaders (KIP-890 part 1, Kafka's AddPartitionsToTxnManager).

Before a leader appends a transactional batch (Produce) or a group coordinator stores transactional
offsets (TxnOffsetCommit), the producer's transaction coordinator must confirm that the partition is in
the producer's ongoing transaction. The coordinator is the leader of the transactional id's
__transaction_state partition, which may be any broker: this node's own coordinator answers in-process,
another broker gets AddPartitionsToTxn v4+ with VerifyOnly over `kcli.client` (client id
`broker-<node id>-txn-verification`).

The answers are the coordinator's own errors per partition; callers map them as their API needs (the
Produce path makes the retriable ones NOT_ENOUGH_REPLICAS). No coordinator known is
COORDINATOR_NOT_AVAILABLE, no answer NETWORK_EXCEPTION, both retriable; a coordinator too old for
VerifyOnly (below v4) verifies nothing, and the append goes ahead, as Kafka does on a version mismatch.
Unlike Kafka, requests are not batched across producers: each verification is one request.
A partition the coordinator keeps refusing for REFUSED_FOR_LONG_S is one WARNING on the leader (its
producer retries silently until its transaction times out otherwise).

Transaction version 2 (KIP-890 part 2, Produce v12 and TxnOffsetCommit v5 on a cluster at
transaction.version 2): the producer no longer sends AddPartitionsToTxn, so the leader asks the
coordinator to add the partitions (`add_partitions`: VerifyOnly false, AddPartitionsToTxn v5, client
transaction version 2), Kafka's `addPartition` supported operation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.metadata.loader import MetadataLoader
from kcli.broker.txn.coordinator import TransactionCoordinator
from kcli.broker.txn.metadata import TopicPartition
from kcli.broker.txn.state_manager import TRANSACTION_STATE_TOPIC
from kcli.client import ClientError, KafkaClient, NodeConnections
from kcli.config import BrokerConfig
from kcli.protocol.messages import nested_type
from kcli.security import ReconfigurableSecurity

log = logging.getLogger("kcli.broker.txn")

ADD_PARTITIONS_TO_TXN = 24
FIRST_VERIFY_ONLY_VERSION = 4
FIRST_ADD_PARTITION_VERSION = 5
"""AddPartitionsToTxn v5: the first a broker adds partitions with on the producer's behalf."""
REFUSED_FOR_LONG_S = 10.0
"""How long one partition of a transaction may be refused before the leader says so once: a refusal
after a commit (CONCURRENT_TRANSACTIONS while the markers go out) lasts milliseconds; one that lasts
holds the producer, whose batch is retried until the transaction times out."""


class AddPartitionsToTxnManager:
    """Asks the transaction coordinator of a transactional id, wherever it is, to verify partitions."""

    def __init__(
        self,
        config: BrokerConfig,
        loader: MetadataLoader,
        coordinator: TransactionCoordinator,
        security: ReconfigurableSecurity | None = None,
    ) -> None:
        """`security`: the broker's inter-broker client security, reconfigured with its keystore."""
        self.node_id = config.node_id
        self.loader = loader
        self.coordinator = coordinator
        self.listener_name = config.inter_broker_listener_name
        self.request_timeout = int(config["request.timeout.ms"]) / 1000  # type: ignore[call-overload]
        self.connections = NodeConnections(
            f"broker-{config.node_id}-txn-verification", security or config.inter_broker_security()
        )
        self._refused_since: dict[tuple[str, int, TopicPartition], float] = {}
        """(transactional id, epoch, partition) -> when its refusals began; -1 once logged."""

    def has_transaction_log(self) -> bool:
        """Whether __transaction_state exists at all: without it no transaction can be open."""
        return self.loader.image.topic(TRANSACTION_STATE_TOPIC) is not None

    async def verify_transaction(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """The coordinator's answer for each partition: NONE when it is in the ongoing transaction."""
        return self._watched(
            transactional_id,
            producer_epoch,
            await self._ask(transactional_id, producer_id, producer_epoch, list(partitions), add=False),
        )

    async def add_partitions(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Transaction version 2: the coordinator adds the partitions to the producer's transaction
        (starting one if none is open); NONE for each once that is durable."""
        return self._watched(
            transactional_id,
            producer_epoch,
            await self._ask(transactional_id, producer_id, producer_epoch, list(partitions), add=True),
        )

    def _watched(
        self, transactional_id: str | None, producer_epoch: int, answers: dict[TopicPartition, ErrorCode]
    ) -> dict[TopicPartition, ErrorCode]:
        """`answers`, after one WARNING for a partition the coordinator has kept refusing for
        REFUSED_FOR_LONG_S (the answer, and the coordinator's state of the transaction when it is
        this node)."""
        if not transactional_id:
            return answers
        now = time.monotonic()
        refused = self._refused_since
        for tp, error in answers.items():
            key = (transactional_id, producer_epoch, tp)
            if error is ErrorCode.none:
                refused.pop(key, None)
                continue
            since = refused.setdefault(key, now)
            if since >= 0 and now - since >= REFUSED_FOR_LONG_S:
                refused[key] = -1.0
                log.warning(
                    "The transaction coordinator has refused partition %s-%d of %s (epoch %d) for %.0f s: %s%s",
                    tp[0], tp[1], transactional_id, producer_epoch, now - since, error.name.upper(),
                    self._local_state(transactional_id),
                )  # fmt: skip
        if len(refused) > 10_000:  # producers that gave up and never came back
            refused.clear()
        return answers

    def _local_state(self, transactional_id: str) -> str:
        """The transaction as this node's coordinator holds it, when this node is its coordinator."""
        found = self.coordinator.state_manager.get_transaction_state(transactional_id)
        if found is None or isinstance(found, ErrorCode):
            return ""
        pending = found.pending_state.state_name if found.pending_state is not None else "none"
        return f" (this node's coordinator: state {found.state.state_name}, pending {pending})"

    async def _ask(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        *,
        add: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        if not transactional_id:
            return dict.fromkeys(partitions, ErrorCode.invalid_request)
        image = self.loader.image
        registration = image.partition(
            TRANSACTION_STATE_TOPIC, self.coordinator.partition_for(transactional_id)
        )
        leader = -1 if registration is None else registration.leader
        if leader == self.node_id:
            if add:
                error = await self.coordinator.add_partitions(
                    transactional_id, producer_id, producer_epoch, partitions, client_transaction_version=2
                )
                return dict.fromkeys(partitions, error)
            return self.coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions
            )
        broker = image.broker(leader) if leader >= 0 else None
        endpoint = None if broker is None else broker.endpoint(self.listener_name)
        if endpoint is None:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        too_old = False

        def build(client: KafkaClient) -> Any:
            nonlocal too_old
            try:
                cls = client.request_type(ADD_PARTITIONS_TO_TXN)
            except ClientError:
                cls = None
            needed = FIRST_ADD_PARTITION_VERSION if add else FIRST_VERIFY_ONLY_VERSION
            if cls is None or cls.__version__ < needed:
                too_old = True
                raise ClientError(f"broker {leader} cannot take AddPartitionsToTxn v{needed}.")
            txn_cls = nested_type(cls, "AddPartitionsToTxnTransaction")
            topic_cls = nested_type(cls, "AddPartitionsToTxnTopic")
            by_topic: dict[str, list[int]] = {}
            for topic, index in partitions:
                by_topic.setdefault(topic, []).append(index)
            txn = txn_cls(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                verify_only=not add,
                topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )
            return cls(transactions=(txn,))

        response = await self.connections.send(
            leader, (endpoint.host, endpoint.port), build, timeout=self.request_timeout
        )
        if too_old:
            if add:  # nothing added: the batch must not go in as part of no transaction
                log.warning("Broker %d cannot add partitions to transactions", leader)
                return dict.fromkeys(partitions, ErrorCode.unsupported_version)
            log.warning("Broker %d cannot verify transactions; appending without verification", leader)
            return dict.fromkeys(partitions, ErrorCode.none)
        if response is None:
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        if response.error_code is not ErrorCode.none:
            error = response.error_code
            if error is ErrorCode.cluster_authorization_failed:  # not the client's business
                error = ErrorCode.invalid_txn_state
            return dict.fromkeys(partitions, error)
        answers: dict[TopicPartition, ErrorCode] = {}
        for result in response.results_by_transaction:
            if result.transactional_id != transactional_id:
                continue
            for topic in result.topic_results:
                for partition in topic.results_by_partition:
                    answers[(topic.name, partition.partition_index)] = partition.partition_error_code
        return {tp: answers.get(tp, ErrorCode.unknown_server_error) for tp in partitions}

    async def close(self) -> None:
        await self.connections.close()
