"""Forwarded admin requests carry the caller (KIP-590 Envelope), in a three-node SASL_SSL cluster.

A broker whose controller is not the active one forwards CreateTopics in an Envelope; the active
controller logs the principal, client id and address it handles the request as (the SCRAM user, not
the forwarding broker). An Envelope a client sends a broker listener closes its connection, as Kafka's
does; one the controller listener cannot read is refused in the envelope's error code.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.errors import ErrorCode
from secure_clients import SecuredCluster, secured_cluster, topic
from waiting import wait_for

from kcli.client import ClientError, KafkaClient
from kcli.protocol.envelope import (
    deserialize_principal,
    parse_address,
    request_bytes,
    serialize_principal,
)
from kcli.protocol.messages import nested_type, request_type
from kcli.security.client_config import load_client_config

pytestmark = pytest.mark.timeout(240)

CREATE_TOPICS = 19
METADATA = 3


def test_principal_as_kafka_serializes_it() -> None:
    """DefaultKafkaPrincipalBuilder.serialize: version 0, then DefaultPrincipalData (compact strings)."""
    data = serialize_principal("User:alice")
    assert data == bytes.fromhex("0000" + "05" + b"User".hex() + "06" + b"alice".hex() + "00" + "00")
    assert deserialize_principal(data) == "User:alice"
    assert parse_address(bytes([127, 0, 0, 1])) == "127.0.0.1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    with secured_cluster(tmp_path_factory.mktemp("envelope-cluster"), "sasl_ssl") as cluster:
        yield cluster


def create_topics(name: str) -> object:
    cls = request_type(CREATE_TOPICS, 7)
    topic_cls = nested_type(cls, "CreatableTopic")
    return cls(
        topics=(topic_cls(name=name, num_partitions=1, replication_factor=3, assignments=(), configs=()),),
        timeout=timedelta(seconds=20),
        validate_only=False,
    )


def controller_address(cluster: SecuredCluster, node: int) -> str:
    server = (cluster.data_dir / f"node-{node}" / "server.properties").read_text()
    match = re.search(r"CONTROLLER://([\d.]+:\d+)", server)
    assert match, server
    return match.group(1)


async def send(address: str, request: object, cluster: SecuredCluster | None, client_id: str) -> object:
    security = load_client_config(cluster.client_properties).security if cluster else None
    kwargs = {"security": security} if security else {}
    async with await KafkaClient.connect(address, client_id=client_id, **kwargs) as client:
        return await client.send(request, timeout=30)


def test_a_forwarded_request_runs_as_its_caller(cluster: SecuredCluster) -> None:
    """CreateTopics through every broker as admin: at least two of them forward it to the active
    controller (the broker logged in to its SASL_SSL listener as admin, with PLAIN), which handles it as
    User:admin with the client's id and address."""
    names = {}
    for node, address in enumerate(cluster.bootstrap.split(","), start=1):
        name, client_id = topic(), f"envelope-test-{node}"
        response = asyncio.run(send(address, create_topics(name), cluster, client_id))
        assert [t.error_code for t in response.topics] == [ErrorCode.none], response
        names[client_id] = name

    def forwarded() -> list[str] | None:
        seen = re.findall(
            r"CreateTopics v7 forwarded by User:admin \(127\.0\.0\.1:\d+\) for principal User:admin, "
            r"client id (envelope-test-\d), client address 127\.0\.0\.1",
            cluster.logs(),
        )
        return seen if len(set(seen)) >= 2 else None

    assert set(wait_for("the controller's log of forwarded requests", forwarded, 10)) <= set(names)


def test_an_envelope_from_a_client_closes_its_connection(cluster: SecuredCluster) -> None:
    """Kafka serves Envelope on the controller listener alone; the broker stays up."""
    address = cluster.bootstrap.split(",")[0]
    envelope = EnvelopeRequest(
        request_data=request_bytes(create_topics(topic()), client_id="forger", correlation_id=1),
        request_principal=serialize_principal("User:admin"),
        client_host_address=bytes([127, 0, 0, 1]),
    )
    with pytest.raises(ClientError):
        asyncio.run(send(address, envelope, cluster, "forger"))
    assert "an Envelope is only accepted on the controller listener" in cluster.logs()
    cls = request_type(METADATA, 12)
    answer = asyncio.run(
        send(
            address,
            cls(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
            cluster,
            "after",
        )
    )
    assert len(answer.brokers) == 3


@pytest.mark.parametrize(
    ("principal", "address", "api_key", "error"),
    [
        (b"\x00\x07junk", bytes([127, 0, 0, 1]), CREATE_TOPICS, ErrorCode.principal_deserialization_failure),
        (serialize_principal("User:admin"), b"\x01\x02", CREATE_TOPICS, ErrorCode.invalid_request),
        (serialize_principal("User:admin"), bytes([127, 0, 0, 1]), METADATA, ErrorCode.invalid_request),
    ],
    ids=["principal", "address", "not-forwardable"],
)
def test_an_envelope_the_controller_cannot_read(
    cluster: SecuredCluster, principal: bytes, address: bytes, api_key: int, error: ErrorCode
) -> None:
    if api_key == METADATA:
        cls = request_type(METADATA, 12)
        inner = cls(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    else:
        inner = create_topics(topic())
    envelope = EnvelopeRequest(
        request_data=request_bytes(inner, client_id="forger", correlation_id=1),
        request_principal=principal,
        client_host_address=address,
    )
    # the controller listener is SASL_SSL too: admin's SCRAM login, as client.properties has it
    answer = asyncio.run(send(controller_address(cluster, 1), envelope, cluster, "broker-like"))
    assert answer.error_code is error and answer.response_data is None
