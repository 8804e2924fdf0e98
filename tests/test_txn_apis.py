"""Transaction APIs on the wire against a real broker process (kio requests, no client library).

TxnOffsetCommit v3+ checks the member, generation and static instance as Kafka's group coordinator
does for a transactional commit; OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT while
such a commit is pending; ListTransactions filters by state, producer id, duration (v1) and
transactional id pattern (v2); DescribeTransactions answers unknown ids with TRANSACTIONAL_ID_NOT_FOUND
and, like Kafka, a start time of -1 when no transaction is open.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import pytest
from conftest import BrokerProcess
from kio.schema.errors import ErrorCode
from test_groups import (
    OFFSET_FETCH,
    fetch_request,
    find,
    join_alone,
    join_request,
    nested,
    offsets_of,
    req,
    sync_request,
)
from test_transactions import FAST, create_topic
from waiting import wait_for_async

from kcli.client import KafkaClient

pytestmark = pytest.mark.timeout(60)

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 10, 22, 24, 25, 26
TXN_OFFSET_COMMIT, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 28, 65, 66
MS = datetime.timedelta(milliseconds=1)


async def init_producer(
    client: KafkaClient, transactional_id: str, timeout_ms: int = 60000
) -> tuple[int, int]:
    """FindCoordinator (creates __transaction_state), then InitProducerId until the coordinator is ready."""
    found = await client.send(req(FIND_COORDINATOR, 4, key_type=1, coordinator_keys=(transactional_id,)))
    assert found.coordinators[0].error_code == ErrorCode.none
    seen: list[Any] = []

    async def initialized() -> tuple[int, int] | None:
        answer = await client.send(
            req(
                INIT_PRODUCER_ID,
                4,
                transactional_id=transactional_id,
                transaction_timeout=timeout_ms * MS,
                producer_id=-1,
                producer_epoch=-1,
            )
        )
        seen.append(answer)
        if answer.error_code == ErrorCode.none:
            return answer.producer_id, answer.producer_epoch
        if answer.error_code not in (
            ErrorCode.coordinator_load_in_progress,
            ErrorCode.coordinator_not_available,
        ):
            pytest.fail(f"InitProducerId answered {answer}")  # not a coordinator still loading: no retry
        return None

    return await wait_for_async(
        f"InitProducerId for {transactional_id}", initialized, 15, 0.1, explain=lambda: f"last: {seen[-1:]}"
    )


async def add_offsets(client: KafkaClient, transactional_id: str, pid: int, epoch: int, group: str) -> None:
    answer = await client.send(
        req(
            ADD_OFFSETS_TO_TXN,
            4,
            transactional_id=transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            group_id=group,
        )
    )
    assert answer.error_code == ErrorCode.none


async def txn_commit(
    client: KafkaClient,
    version: int,
    transactional_id: str,
    pid: int,
    epoch: int,
    group: str,
    offset: int,
    *,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
) -> ErrorCode:
    partition = nested(
        TXN_OFFSET_COMMIT,
        version,
        "TxnOffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    topic = nested(
        TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestTopic", name="in", partitions=(partition,)
    )
    answer = await client.send(
        req(
            TXN_OFFSET_COMMIT,
            version,
            transactional_id=transactional_id,
            group_id=group,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            topics=(topic,),
        )
    )
    [[error]] = [[p.error_code for p in t.partitions] for t in answer.topics]
    return error


async def end_txn(client: KafkaClient, transactional_id: str, pid: int, epoch: int, *, commit: bool) -> None:
    answer = await client.send(
        req(
            END_TXN,
            4,
            transactional_id=transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            committed=commit,
        )
    )
    assert answer.error_code == ErrorCode.none


async def fetch_offset(client: KafkaClient, group: str, *, require_stable: bool, version: int = 7) -> tuple:
    """(offset, error) of in-0 for `group`."""
    response = await client.send(fetch_request(version, {group: {"in": [0]}}, require_stable=require_stable))
    assert response.__api_key__ == OFFSET_FETCH
    offset, _, error = offsets_of(response, group=group)[group][("in", 0)]
    return offset, error


async def wait_for_offset(client: KafkaClient, group: str, expected: int) -> None:
    """OffsetFetch (require_stable) until `group` has `expected` committed; the failure names the last answer."""
    seen: list[tuple[int, ErrorCode]] = []

    async def stable() -> bool:
        seen.append(await fetch_offset(client, group, require_stable=True))
        return seen[-1] == (expected, ErrorCode.none)

    await wait_for_async(f"{group} at offset {expected}", stable, 10, explain=lambda: f"last: {seen[-1:]}")


def test_txn_offset_commit_checks_member_generation_and_instance(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "in", 1)

    async def body() -> None:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            pid, epoch = await init_producer(client, "members-tx")
            await find(client)  # creates __consumer_offsets
            member_id, generation = await join_alone(client, "dynamic", topics=("in",))
            joined = await client.send(join_request(9, "static", "", instance_id="inst-1", topics=("in",)))
            assert joined.error_code == ErrorCode.none
            static_id, static_generation = joined.member_id, joined.generation_id
            synced = await client.send(
                sync_request(
                    5, "static", static_generation, static_id, {static_id: b""}, instance_id="inst-1"
                )
            )
            assert synced.error_code == ErrorCode.none
            for group in ("dynamic", "static", "nobody"):
                await add_offsets(client, "members-tx", pid, epoch, group)

            async def commit(group: str, version: int = 3, **member: Any) -> ErrorCode:
                return await txn_commit(client, version, "members-tx", pid, epoch, group, 7, **member)

            dynamic = {"member_id": member_id, "generation": generation}
            assert await commit("dynamic", generation=generation + 1, member_id=member_id) == (
                ErrorCode.illegal_generation
            )
            assert await commit("dynamic", generation=generation, member_id="stranger") == (
                ErrorCode.unknown_member_id
            )
            # A member id given without a generation is still checked, and then the generation.
            assert await commit("dynamic", member_id=member_id) == ErrorCode.illegal_generation
            assert await commit(
                "static", generation=static_generation, member_id="impostor", instance_id="inst-1"
            ) == (ErrorCode.fenced_instance_id)
            assert await commit(
                "static", generation=static_generation, member_id=static_id, instance_id="inst-9"
            ) == (ErrorCode.unknown_member_id)
            # A group that does not exist: a generation means a member of nothing.
            assert await commit("nobody", generation=1, member_id="ghost") == ErrorCode.illegal_generation
            # Accepted: the member with its generation, the static member, and a member-less commit
            # (generation -1) even though the group has members - a transactional commit may do that.
            assert await commit("dynamic", **dynamic) == ErrorCode.none
            assert await commit(
                "static", 4, generation=static_generation, member_id=static_id, instance_id="inst-1"
            ) == (ErrorCode.none)
            assert await commit("nobody") == ErrorCode.none
            # v0-v2 carry no member: nothing to check.
            assert await commit("dynamic", 2) == ErrorCode.none
            await end_txn(client, "members-tx", pid, epoch, commit=True)
            for group in ("dynamic", "static", "nobody"):
                await wait_for_offset(client, group, 7)

    asyncio.run(body())


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_offset_fetch_require_stable_while_a_txn_commit_is_pending(broker_factory, commit: bool) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "in", 1)

    async def body() -> None:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            pid, epoch = await init_producer(client, "stable-tx")
            await find(client)
            await add_offsets(client, "stable-tx", pid, epoch, "readers")
            assert await txn_commit(client, 3, "stable-tx", pid, epoch, "readers", 42) == ErrorCode.none
            for version in (7, 8, 9):
                # require_stable: the pending offset makes the partition unstable; without it the
                # committed offset (none yet) is answered.
                assert await fetch_offset(client, "readers", require_stable=True, version=version) == (
                    -1,
                    ErrorCode.unstable_offset_commit,
                )
                assert await fetch_offset(client, "readers", require_stable=False, version=version) == (
                    -1,
                    ErrorCode.none,
                )
            await end_txn(client, "stable-tx", pid, epoch, commit=commit)
            await wait_for_offset(client, "readers", 42 if commit else -1)

    asyncio.run(body())


async def list_ids(
    client: KafkaClient, version: int, **filters: Any
) -> tuple[ErrorCode, list[str], list[str]]:
    values = {
        "state_filters": (),
        "producer_id_filters": (),
        "duration_filter": -1,
        "transactional_id_pattern": None,
    }
    response = await client.send(req(LIST_TRANSACTIONS, version, **{**values, **filters}))
    return (
        response.error_code,
        list(response.unknown_state_filters),
        sorted(t.transactional_id for t in response.transaction_states),
    )


def test_list_transactions_filters_and_describe_unknown_ids(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(overrides=FAST)
    create_topic(broker.bootstrap, "in", 1)

    async def body() -> None:
        async with await KafkaClient.connect(broker.bootstrap) as client:
            old_pid, old_epoch = await init_producer(client, "app-old")
            answer = await client.send(
                req(
                    ADD_PARTITIONS_TO_TXN,
                    3,
                    v3_and_below_transactional_id="app-old",
                    v3_and_below_producer_id=old_pid,
                    v3_and_below_producer_epoch=old_epoch,
                    v3_and_below_topics=(
                        nested(
                            ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic", name="in", partitions=(0,)
                        ),
                    ),
                )
            )
            assert answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
            started = time.monotonic()
            await asyncio.sleep(0.6)
            new_pid, _ = await init_producer(client, "app-new")
            await init_producer(client, "other")
            elapsed_ms = int((time.monotonic() - started) * 1000)

            everything = ["app-new", "app-old", "other"]
            assert await list_ids(client, 0) == (ErrorCode.none, [], everything)
            assert await list_ids(client, 1, state_filters=("Ongoing",)) == (ErrorCode.none, [], ["app-old"])
            assert await list_ids(client, 1, producer_id_filters=(new_pid,)) == (
                ErrorCode.none,
                [],
                ["app-new"],
            )
            # Unknown state names are reported, and a filter of unknown names only matches nothing.
            assert await list_ids(client, 1, state_filters=("Nope",)) == (ErrorCode.none, ["Nope"], [])
            assert await list_ids(client, 1, state_filters=("Nope", "Empty")) == (
                ErrorCode.none,
                ["Nope"],
                ["app-new", "other"],
            )
            # v1 duration filter: transactions running longer than it. Ids without a transaction have a
            # start time of -1 and so always pass it, as in Kafka.
            assert await list_ids(
                client, 1, state_filters=("Ongoing",), duration_filter=elapsed_ms - 300
            ) == (
                ErrorCode.none,
                [],
                ["app-old"],
            )
            assert await list_ids(client, 1, state_filters=("Ongoing",), duration_filter=60_000) == (
                ErrorCode.none,
                [],
                [],
            )
            assert await list_ids(client, 1, duration_filter=60_000) == (
                ErrorCode.none,
                [],
                ["app-new", "other"],
            )
            # v0 has no duration filter: it is not applied.
            assert await list_ids(client, 0, duration_filter=60_000) == (ErrorCode.none, [], everything)
            # v2 pattern: a full match of a Java-style regular expression; empty or null means all.
            assert await list_ids(client, 2, transactional_id_pattern="app-.*") == (
                ErrorCode.none,
                [],
                ["app-new", "app-old"],
            )
            assert await list_ids(client, 2, transactional_id_pattern="app") == (ErrorCode.none, [], [])
            assert await list_ids(client, 2, transactional_id_pattern="") == (ErrorCode.none, [], everything)
            assert await list_ids(client, 2, transactional_id_pattern="(") == (
                ErrorCode.invalid_regular_expression,
                [],
                [],
            )

            described = await client.send(
                req(DESCRIBE_TRANSACTIONS, 0, transactional_ids=("never-seen", "app-old", "", "app-new"))
            )
            by_id = {s.transactional_id: s for s in described.transaction_states}
            assert by_id["never-seen"].error_code == ErrorCode.transactional_id_not_found
            assert by_id["never-seen"].producer_id == -1 and by_id["never-seen"].topics == ()
            assert by_id[""].error_code == ErrorCode.invalid_request
            old = by_id["app-old"]
            assert (old.error_code, old.transaction_state, old.producer_id) == (
                ErrorCode.none,
                "Ongoing",
                old_pid,
            )
            assert old.transaction_timeout == 60000 * MS
            assert [(t.topic, tuple(t.partitions)) for t in old.topics] == [("in", (0,))]
            # No transaction open: -1 on the wire, as Kafka sends (read as None).
            assert (by_id["app-new"].transaction_state, by_id["app-new"].transaction_start_time) == (
                "Empty",
                None,
            )
            now = datetime.datetime.now(datetime.UTC)
            assert now - datetime.timedelta(seconds=30) < old.transaction_start_time <= now

    asyncio.run(body())
